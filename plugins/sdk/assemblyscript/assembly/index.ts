// The AssemblyScript guest SDK for retryhost plugins (ABI v1, abi/ABI.md).
//
// A plugin is an entry file that registers a factory at its top level and
// re-exports the ABI's exports for its kind:
//
//   import { Config, Decider, Decision, Attempt, registerCondition } from "<sdk>/assembly";
//   export * from "<sdk>/assembly/exports/condition";
//
//   class Rule extends Decider {
//     decide(a: Attempt): Decision { return a.status == 429 ? Decision.retry() : Decision.none(); }
//   }
//   registerCondition((c: Config): Decider | null => new Rule());
//
// The SDK registers a 64 KiB scratch buffer, decodes the records, encodes
// the answers, declares the policy (with a transform's static verdicts and
// auto_close), closes a decided stream itself and collects garbage every
// 256 exports. Build with the flags of this package's Makefile (the
// minimal runtime, the start function exported as _initialize, no abort
// import).
export * from "./abi";
export * from "./records";
export * from "./json";
export {
  BUFFER_SIZE, Config, Decider, NO_ROOM, Stream, Transform, log, logDebug, logError, logInfo, logWarn, noStatics,
  registerCondition, registerTransform,
} from "./guest";
