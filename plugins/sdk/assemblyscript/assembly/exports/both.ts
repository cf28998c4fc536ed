// The exports of a plugin that is both a condition and a transform.
export * from "./transform";
export { retryhost_decide } from "./condition";
