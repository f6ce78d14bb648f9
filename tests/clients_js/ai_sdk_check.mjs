// The Vercel AI SDK against a gateway, as an application would use it: only the
// provider's baseURL and apiKey differ from a call to OpenAI.
//
//   node ai_sdk_check.mjs --base-url http://127.0.0.1:8000 --model NAME [--only KIND,...]
//     [--second-base-url URL]
//
// With a second gateway, the conversation's turns alternate between the two (first,
// second, first), as behind a load balancer in front of replicas sharing a store.
// (or GATEWAY_BASE_URL, GATEWAY_MODEL, GATEWAY_API_KEY, CHECKS_ONLY). The base URL is
// the gateway's root or its /v1. Each check runs through openai(model), the Responses
// API (the provider's default), and through openai.chat(model), Chat Completions, and
// prints one JSON line: {"check": "<api>.<kind>", "ok": bool, "detail": ...}. The exit
// status is 1 when a check failed, 2 on a usage error.

import { parseArgs } from "node:util";

import { createOpenAI } from "@ai-sdk/openai";
import { generateObject, generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

const KINDS = ["generateText", "streamText", "toolLoop", "generateObject", "conversation"];
// Small replies: the real engine runs on CPU, and the FAKE engine would otherwise
// generate up to the context length.
const MAX_OUTPUT_TOKENS = 32;
const PROMPT = "Say hello in one short sentence.";
// No retries: a refused request must show its first error, not a RetryError.
const COMMON = { maxOutputTokens: MAX_OUTPUT_TOKENS, maxRetries: 0, temperature: 0 };

function options() {
  const { values } = parseArgs({
    options: {
      "base-url": { type: "string", default: process.env.GATEWAY_BASE_URL },
      model: { type: "string", default: process.env.GATEWAY_MODEL },
      "api-key": { type: "string", default: process.env.GATEWAY_API_KEY ?? "unused" },
      only: { type: "string", default: process.env.CHECKS_ONLY ?? KINDS.join(",") },
      "second-base-url": { type: "string", default: process.env.GATEWAY_SECOND_BASE_URL },
    },
  });
  const kinds = values.only.split(",").filter(Boolean);
  const unknown = kinds.filter((kind) => !KINDS.includes(kind));
  if (!values["base-url"] || !values.model || unknown.length > 0 || kinds.length === 0) {
    console.error(
      `usage: node ai_sdk_check.mjs --base-url URL --model NAME [--only ${KINDS.join(",")}]` +
        (unknown.length > 0 ? `\nunknown check: ${unknown.join(", ")}` : ""),
    );
    process.exit(2);
  }
  const baseURL = apiRoot(values["base-url"]);
  const secondURL = values["second-base-url"] ? apiRoot(values["second-base-url"]) : baseURL;
  return { baseURL, secondURL, apiKey: values["api-key"], model: values.model, kinds };
}

function apiRoot(url) {
  const root = url.replace(/\/+$/, "");
  return root.endsWith("/v1") ? root : `${root}/v1`;
}

// What the SDK's errors carry beyond a message: the HTTP status and the gateway's body
// (APICallError), the raw text a failed object came from (NoObjectGeneratedError).
function describe(error) {
  const detail = { error: error?.name ?? "Error", message: String(error?.message ?? error) };
  for (const key of ["statusCode", "responseBody", "url", "text", "finishReason"]) {
    if (error?.[key] !== undefined) detail[key] = error[key];
  }
  if (error?.requestBodyValues && typeof error.requestBodyValues === "object") {
    const sent = Object.entries(error.requestBodyValues).filter(([, value]) => value !== undefined);
    detail.requestFields = sent.map(([key]) => key).sort();
  }
  if (error?.cause && error.cause !== error) detail.cause = describe(error.cause);
  return detail;
}

async function checkGenerateText(model) {
  const result = await generateText({ model, prompt: PROMPT, ...COMMON });
  if (result.text.length === 0) throw new Error(`empty text, finishReason ${result.finishReason}`);
  return { text: result.text, finishReason: result.finishReason, usage: result.usage };
}

async function checkStreamText(model) {
  // streamText reports an error through onError, not by throwing from textStream.
  const errors = [];
  const onError = ({ error }) => errors.push(error);
  const result = streamText({ model, prompt: PROMPT, ...COMMON, onError });
  const parts = [];
  for await (const part of result.textStream) parts.push(part);
  if (errors.length > 0) throw errors[0];
  const text = parts.join("");
  if (text.length === 0) throw new Error("empty textStream");
  return { text, numParts: parts.length, finishReason: await result.finishReason };
}

async function checkToolLoop(model) {
  const calls = [];
  const add = tool({
    description: "Add two numbers.",
    inputSchema: z.object({ a: z.number(), b: z.number() }),
    execute: async ({ a, b }) => {
      calls.push({ a, b });
      return a + b;
    },
  });
  const result = await generateText({
    model,
    prompt: "What is 2 + 3? Use the add tool.",
    tools: { add },
    toolChoice: { type: "tool", toolName: "add" },
    stopWhen: stepCountIs(2),
    ...COMMON,
  });
  const [first] = result.steps;
  const called = first?.toolCalls.map((call) => call.toolName) ?? [];
  const errors = first?.content.filter((part) => part.type === "tool-error") ?? [];
  if (errors.length > 0) throw new Error(`tool error: ${JSON.stringify(errors)}`);
  if (!called.includes("add")) throw new Error(`first step called ${JSON.stringify(called)}`);
  if (calls.length === 0) throw new Error("the tool's execute never ran");
  if (result.steps.length !== 2) throw new Error(`${result.steps.length} steps, not 2`);
  return {
    calls,
    results: first.toolResults.map((r) => r.output),
    steps: result.steps.map((step) => ({
      finishReason: step.finishReason,
      toolCalls: step.toolCalls.map((call) => call.toolName),
      text: step.text,
    })),
  };
}

async function checkGenerateObject(model) {
  const schema = z.object({ city: z.string(), population: z.number().int() });
  const { object, finishReason } = await generateObject({
    model,
    schema,
    prompt: "Name a city and its population, as JSON.",
    ...COMMON,
  });
  return { object, finishReason };
}

// A second turn built from the first reply's messages, as chat applications keep their
// history: the Responses provider then refers to the earlier assistant item by its id
// (an "item_reference" input item) instead of repeating its text.
// Three turns, each sending the replies before it back as the SDK builds them (through
// openai(model): item_reference items from the second turn on).
async function checkConversation(model, otherModel) {
  const messages = [{ role: "user", content: PROMPT }];
  const texts = [];
  for (const turnModel of [model, otherModel, model]) {
    const reply = await generateText({ model: turnModel, messages, ...COMMON });
    if (reply.text.length === 0) throw new Error(`empty reply, ${reply.finishReason}`);
    texts.push(reply.text);
    messages.push(...reply.response.messages, { role: "user", content: "Again." });
  }
  return { first: texts[0], second: texts[1], third: texts[2] };
}

const CHECKS = {
  generateText: checkGenerateText,
  streamText: checkStreamText,
  toolLoop: checkToolLoop,
  generateObject: checkGenerateObject,
  conversation: checkConversation,
};

async function main() {
  const { baseURL, secondURL, apiKey, model, kinds } = options();
  const openai = createOpenAI({ baseURL, apiKey });
  const second = createOpenAI({ baseURL: secondURL, apiKey });
  const apis = {
    responses: [openai(model), second(model)],
    chat: [openai.chat(model), second.chat(model)],
  };
  let failed = false;
  for (const [api, [languageModel, otherModel]] of Object.entries(apis)) {
    for (const kind of kinds) {
      const check = `${api}.${kind}`;
      try {
        const detail = await CHECKS[kind](languageModel, otherModel);
        console.log(JSON.stringify({ check, ok: true, detail }));
      } catch (error) {
        failed = true;
        console.log(JSON.stringify({ check, ok: false, detail: describe(error) }));
      }
    }
  }
  process.exit(failed ? 1 : 0);
}

await main();
