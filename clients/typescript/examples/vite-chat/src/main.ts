// A chat UI on onejob: each message the user sends is one intent, so one
// job, however often it is sent (a double click, a retry after a lost
// answer, a reload mid-answer). Its prose streams from GET /jobs/{id}/output
// as it comes; reloaded, the page sends the message again with the same
// key, finds the same job, and shows the text so far once, then the rest.
// When the job waits for the user (it failed and may take a fallback), the
// page says so and offers one; the fallback's text follows on the same stream.
import { OnejobClient, OnejobError, SessionStorageKeyStore } from "onejob-client";

/** The provider a fallback goes to (qualified for `chat` by the default configuration). */
const FALLBACK = "sim-fast";

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const token = $<HTMLInputElement>("token");
const message = $<HTMLTextAreaElement>("message");
const answer = $<HTMLDivElement>("answer");
const note = $<HTMLParagraphElement>("note");
const fallback = $<HTMLButtonElement>("fallback");

/** The tab's current message: its intent id, its text, and whether it was sent. */
interface Intent {
  id: string;
  message: string;
  sent: boolean;
}

token.value = sessionStorage.getItem("chat:token") ?? "";
token.addEventListener("change", () => sessionStorage.setItem("chat:token", token.value.trim()));

function client(): OnejobClient {
  return new OnejobClient({ baseUrl: "/api", token: token.value.trim(), keyStore: new SessionStorageKeyStore() });
}

function kept(): Intent | null {
  try {
    return JSON.parse(sessionStorage.getItem("chat:intent") ?? "null") as Intent | null;
  } catch {
    return null;
  }
}

function keep(intent: Intent): void {
  sessionStorage.setItem("chat:intent", JSON.stringify(intent));
}

let intent: Intent = kept() ?? { id: crypto.randomUUID(), message: message.value, sent: false };
message.value = intent.message;
let reading: AbortController | null = null;

async function send(): Promise<void> {
  intent = { ...intent, message: message.value, sent: true };
  keep(intent);
  const onejob = client();
  try {
    const { job, replayed } = await onejob.createJob({ task: "chat", input: { message: intent.message } }, { intent: intent.id });
    note.textContent = replayed ? `The same job as before: ${job.id}` : `Job ${job.id}`;
    document.body.dataset.job = job.id;
    document.body.dataset.replayed = String(replayed);
    await read(onejob, job.id);
  } catch (error) {
    note.textContent = error instanceof OnejobError ? `${error.type}: ${error.detail ?? error.message}` : String(error);
  }
}

/** Shows the job's output from its first item: the text so far, then the rest. */
async function read(onejob: OnejobClient, jobId: string): Promise<void> {
  reading?.abort();
  const controller = new AbortController();
  reading = controller;
  answer.textContent = "";
  answer.dataset.state = "reading";
  for await (const event of onejob.stream(jobId, { signal: controller.signal })) {
    if (event.kind === "text") {
      answer.textContent += event.text;
      answer.dataset.state = "streaming";
    } else if (event.kind === "restart") {
      answer.textContent = "";
    } else if (event.kind === "waiting") {
      answer.dataset.state = "waiting";
      note.textContent = `The job ${event.awaiting.state}: ${event.awaiting.next}.`;
      fallback.hidden = event.awaiting.waiting_for !== "client";
      fallback.dataset.job = jobId;
    } else if (event.kind === "result") {
      if (typeof event.result === "string") answer.textContent = event.result;
      answer.dataset.state = "result";
      fallback.hidden = true;
    } else if (event.kind === "error") {
      answer.dataset.state = "error";
      note.textContent = `No answer: the job is ${event.state}.`;
    }
  }
}

$("send").addEventListener("click", () => void send());
$("new").addEventListener("click", () => {
  reading?.abort();
  intent = { id: crypto.randomUUID(), message: message.value, sent: false };
  keep(intent);
  answer.textContent = "";
  note.textContent = "";
  delete answer.dataset.state;
});
fallback.addEventListener("click", async () => {
  const jobId = fallback.dataset.job;
  if (!jobId) return;
  const added = await client().fallback(jobId, FALLBACK); // a double click adds one attempt
  note.textContent = added.kind === "added" ? `Attempt ${added.attempt.number} on ${FALLBACK}` : `Not now: ${added.kind}`;
  fallback.hidden = true;
});

// A reload carries on with the tab's message: sent already, it is sent
// again with its key, which finds its job.
if (intent.sent) void send();
