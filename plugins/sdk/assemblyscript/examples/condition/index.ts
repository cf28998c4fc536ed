// A condition: retry a 429 up to three attempts, waiting the server's
// Retry-After, then switch to the fallback model; switch at once when the
// model is overloaded. Config: {"fallback": "provider/model"} (required).
import { Attempt, Config, Decider, Decision, ErrorClass, registerCondition } from "../../assembly";
export * from "../../assembly/exports/condition";

class Rule extends Decider {
  constructor(private fallback: string) { super(); }

  decide(a: Attempt): Decision {
    if (a.status == 429 && a.number < 3) {
      const d = Decision.retry();
      d.useRetryAfter = true;
      d.maxAttempts = 3;
      return d;
    }
    if (a.status == 429 || a.class == ErrorClass.Overloaded) return Decision.switchTo(this.fallback);
    return Decision.none(); // no opinion: the next condition decides
  }
}

registerCondition((config: Config): Decider | null => {
  const j = config.json();
  let fallback = "";
  if (!j.blank() && j.objectBegin()) {
    while (j.nextKey()) {
      if (j.keyIs("fallback")) {
        if (j.field()) fallback = j.string(256, "longer than 256 bytes");
      } else {
        j.unknown();
      }
    }
  }
  if (!j.finish()) return config.reject<Decider>(j.error!);
  if (fallback.length == 0) return config.reject<Decider>("config: \"fallback\": the fallback model is required");
  return new Rule(fallback);
});
