// A React hook over onejob-client: one job per intent, followed to its end.
// An example, not a dependency of the package: copy it into your app.
//
//   const { job, error, start, fallback } = useJob(client, "summarize-form");
//   <button onClick={() => start({ task: "summarize", input: { text } })}>Generate</button>
//   <button onClick={() => fallback("gpt-4o-mini")} disabled={!job}>Try another provider</button>
//
// Clicking Generate twice, or again after a lost answer, or after a page
// reload (with a SessionStorageKeyStore), is the same intent: one job.
import { useCallback, useEffect, useRef, useState } from "react";
import type { FallbackResult, Job, OnejobClient } from "onejob-client";

export function useJob(client: OnejobClient, intent: string) {
  const [job, setJob] = useState<Job>();
  const [error, setError] = useState<unknown>();
  const watching = useRef<AbortController | undefined>(undefined);

  // Stop following when the component goes away.
  useEffect(() => () => watching.current?.abort(), []);

  const follow = useCallback(
    async (id: string) => {
      watching.current?.abort();
      const controller = new AbortController();
      watching.current = controller;
      try {
        for await (const seen of client.watch(id, { signal: controller.signal })) setJob(seen);
      } catch (e) {
        setError(e);
      }
    },
    [client],
  );

  const start = useCallback(
    async (request: { task: string; input: unknown; provider?: string }) => {
      setError(undefined);
      try {
        const { job } = await client.createJob(request, { intent });
        setJob(job);
        void follow(job.id);
      } catch (e) {
        setError(e);
      }
    },
    [client, intent, follow],
  );

  const fallback = useCallback(
    async (provider: string): Promise<FallbackResult | undefined> => {
      if (!job) return undefined;
      const result = await client.fallback(job.id, provider);
      // "attempt-outcome-unknown" and the like are results: show result.retryAfter.
      return result;
    },
    [client, job],
  );

  return { job, error, start, fallback };
}
