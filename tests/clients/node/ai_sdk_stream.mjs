// The AI SDK's streamText with @ai-sdk/openai's default model (the Responses API) against a base URL
// from the environment; prints one JSON summary line on stdout (tests/clients/test_ai_sdk.py).
//
//   AI_BASE_URL          the proxy's /v1 URL (required)
//   AI_API_KEY           bearer key (default sk-test)
//   AI_MODEL             model id (default deepseek-v4-pro)
//   AI_PROMPT            the user prompt
//   AI_TOOL              "on" (default): one function tool, get_weather; "off": none
//   AI_PROVIDER_OPTIONS  JSON for providerOptions.openai (e.g. {"forceReasoning":true,"reasoningSummary":"auto"})
//   AI_MAX_STEPS         steps of the tool loop (default 3)
//   AI_TIMEOUT_MS        abort the whole call after this long (default 60000)
//
// Exit 0 with the summary when the stream ended without an error part; 1 otherwise (summary still printed).
import { createOpenAI } from "@ai-sdk/openai";
import { stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

const env = process.env;
if (!env.AI_BASE_URL) {
  process.stderr.write("AI_BASE_URL is required\n");
  process.exit(2);
}
const openai = createOpenAI({ baseURL: env.AI_BASE_URL, apiKey: env.AI_API_KEY ?? "sk-test" });
const summary = {
  text: "",
  reasoning: "",
  toolCalls: [],
  toolResults: [],
  steps: 0,
  finishReason: null,
  usage: null,
  parts: [],
  errors: [],
};
const options = {
  model: openai(env.AI_MODEL ?? "deepseek-v4-pro"),
  prompt: env.AI_PROMPT ?? "What is the weather in Paris?",
  stopWhen: stepCountIs(Number(env.AI_MAX_STEPS ?? 3)),
  maxRetries: 0,
  abortSignal: AbortSignal.timeout(Number(env.AI_TIMEOUT_MS ?? 60000)),
};
if (env.AI_PROVIDER_OPTIONS) {
  options.providerOptions = { openai: JSON.parse(env.AI_PROVIDER_OPTIONS) };
}
if ((env.AI_TOOL ?? "on") !== "off") {
  options.tools = {
    get_weather: tool({
      description: "Current weather for a city",
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => ({ city, forecast: "sunny", celsius: 21 }),
    }),
  };
}

try {
  const result = streamText(options);
  for await (const part of result.fullStream) {
    if (summary.parts.at(-1) !== part.type) summary.parts.push(part.type);
    switch (part.type) {
      case "text-delta":
        summary.text += part.text;
        break;
      case "reasoning-delta":
        summary.reasoning += part.text;
        break;
      case "tool-call":
        summary.toolCalls.push({ id: part.toolCallId, name: part.toolName, input: part.input });
        break;
      case "tool-result":
        summary.toolResults.push({ id: part.toolCallId, name: part.toolName, output: part.output });
        break;
      case "finish-step":
        summary.steps += 1;
        break;
      case "finish":
        summary.finishReason = part.finishReason;
        summary.usage = part.totalUsage;
        break;
      case "error":
        summary.errors.push(String(part.error?.message ?? part.error));
        break;
      default:
        break;
    }
  }
} catch (error) {
  summary.errors.push(String(error?.message ?? error));
}
process.stdout.write(`${JSON.stringify(summary)}\n`);
process.exitCode = summary.errors.length ? 1 : 0;
