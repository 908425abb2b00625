/**
 * The one test for "a plain JSON object" (not an array, not null), shared by the client, the
 * failure reader and the simulator.
 *
 * @internal
 */
export const isRecord = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === "object" && !Array.isArray(value)
