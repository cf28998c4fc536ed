// A transform: replace every "secret" in text deltas with "******".
// Config: none. Fail-closed: a redaction that fails must not leak.
import {
  Config, FailPolicy, Part, PartAction, PartKind, Policy, Stream, StreamInfo, Transform, Verdict, noStatics,
  registerTransform,
} from "../../assembly";
export * from "../../assembly/exports/transform";

class Redact extends Stream {
  part(p: Part): Verdict {
    // p.kind is always a text delta here: every other kind is PASSed by
    // the static verdicts below, without a call.
    const d = p.delta;
    if (!d.includes("secret")) return Verdict.PASS;
    const r = Part.text(p.id, d.replaceAll("secret", "******"));
    return Verdict.replaceWith([r]);
  }
}

const stream = new Redact(); // it keeps no state: one for every stream

class Redactor extends Transform {
  open(info: StreamInfo): Stream | null { return stream; }

  policy(): Policy | null {
    const p = new Policy();
    p.fail = FailPolicy.Closed;
    return p;
  }

  statics(): StaticArray<i8> | null {
    const t = noStatics();
    for (let k = 1; k <= 18; k++) if (k != PartKind.TextDelta) t[k] = <i8>PartAction.Pass;
    return t;
  }
}

registerTransform((config: Config): Transform | null => {
  if (config.bytes.length > 0) return config.reject<Transform>("config: this transform takes none");
  return new Redactor();
});
