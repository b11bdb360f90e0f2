// A React hook over onejob-client: one job per intent, followed to its end.
// An example, not a dependency of the package: copy it into your app.
//
//   const { job, error, start, fallback } = useJob(client, "summarize-form");
//   <button onClick={() => start({ task: "summarize", input: { text } })}>Generate</button>
//   <button onClick={() => fallback("gpt-4o-mini")} disabled={!job}>Try another provider</button>
//
// Clicking Generate twice, or again after a lost answer, or after a page
// reload (with a SessionStorageKeyStore), is the same intent: one job.
//
//   const { text, result } = useAnswer(client, job?.id);
//   <p>{text}</p>
//
//   const { object } = usePartialObject<{ summary: string }>(client, job?.id);
//   <p>{object?.summary}</p>
//
// renders the answer token by token as the job's output brings it (for a
// task with `stream = true`; otherwise whole, at the end). After a reload,
// the same intent finds the same job, and the text so far comes back from
// its first piece, then the rest: one inference, however often the page
// reloads.
import { useCallback, useEffect, useRef, useState } from "react";
import type { FallbackResult, Job, OnejobClient, OutputEvent } from "onejob-client";

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

export function useAnswer(client: OnejobClient, jobId: string | undefined) {
  const [text, setText] = useState("");
  // The answer so far parsed as JSON, as each piece changes it.
  const [partial, setPartial] = useState<unknown>();
  const [result, setResult] = useState<unknown>();
  // The `error` event of a job that ended without a result, or what was thrown.
  const [failure, setFailure] = useState<OutputEvent | unknown>();

  useEffect(() => {
    if (!jobId) return;
    const controller = new AbortController();
    setText("");
    setPartial(undefined);
    setResult(undefined);
    setFailure(undefined);
    (async () => {
      try {
        // A dropped connection is resumed by the client after its last event.
        for await (const event of client.stream(jobId, { signal: controller.signal })) {
          if (event.kind === "text") setText((soFar) => soFar + event.text);
          else if (event.kind === "partial") setPartial(event.value);
          // Another attempt's answer replaces the text so far.
          else if (event.kind === "restart") {
            setText("");
            setPartial(undefined);
          } else if (event.kind === "result") setResult(event.result);
          else setFailure(event);
        }
      } catch (e) {
        if (!controller.signal.aborted) setFailure(e);
      }
    })();
    return () => controller.abort();
  }, [client, jobId]);

  return { text, partial, result, failure };
}

// A JSON answer's fields as they fill: each `partial` holds everything the
// one before held (a string only grows; a number or `true` shows once
// whole), and the result is the last one.
export function usePartialObject<T>(client: OnejobClient, jobId: string | undefined) {
  const { partial, result, failure } = useAnswer(client, jobId);
  const object = (result ?? partial) as Partial<T> | undefined;
  return { object, done: result !== undefined, failure };
}
