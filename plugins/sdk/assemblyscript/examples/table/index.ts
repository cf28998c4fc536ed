// A transform whose streams live in a fixed table: it counts each stream's
// text bytes and logs the count at the end. Config: none. When all SLOTS
// streams of an instance are open it answers NO_ROOM: the host fails only
// that stream (no capacity) and does not count it against the plugin.
import { Config, NO_ROOM, Part, PartKind, Stream, StreamInfo, Transform, Verdict, logInfo, registerTransform } from "../../assembly";
export * from "../../assembly/exports/transform";

const SLOTS = 2;

class Counter extends Stream {
  used: bool = false;
  bytes: i64 = 0;

  part(p: Part): Verdict {
    if (p.kind == PartKind.TextDelta) this.bytes += p.deltaLength;
    return Verdict.PASS;
  }

  end(): Verdict {
    logInfo("text bytes: " + this.bytes.toString());
    return Verdict.PASS;
  }

  close(): void { this.used = false; }
}

class Table extends Transform {
  slots: StaticArray<Counter> = new StaticArray<Counter>(SLOTS);

  constructor() {
    super();
    for (let i = 0; i < SLOTS; i++) this.slots[i] = new Counter();
  }

  open(info: StreamInfo): Stream | null {
    for (let i = 0; i < SLOTS; i++) {
      const c = this.slots[i];
      if (!c.used) {
        c.used = true;
        c.bytes = 0;
        return c;
      }
    }
    return NO_ROOM;
  }
}

registerTransform((config: Config): Transform | null => {
  if (config.bytes.length > 0) return config.reject<Transform>("config: this transform takes none");
  return new Table();
});
