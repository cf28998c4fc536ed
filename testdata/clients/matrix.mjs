// The TypeScript SDKs' checks against a retryhost gateway: openai-node,
// Anthropic's SDK and the Vercel AI SDK (its OpenAI and Anthropic
// providers) on every door, whole and streamed, each door's errors as the
// SDK types them, and fail-overs. It prints one line per check, "ok NAME"
// or "FAIL NAME: why", then "checks N". cmd/retryhost's
// TestServe_TypeScriptClients runs it against serve over mock upstreams
// whose behaviour is the model id (see clients_test.go): RETRYHOST_URL is
// the gateway, RETRYHOST_KEY a client key it accepts.
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { APICallError, embed, embedMany, generateText, jsonSchema, stepCountIs, streamText, tool } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { createAnthropic } from '@ai-sdk/anthropic';

const base = process.env.RETRYHOST_URL;
const key = process.env.RETRYHOST_KEY;
if (!base || !key) {
  console.error('RETRYHOST_URL and RETRYHOST_KEY must be set');
  process.exit(2);
}

// The AI SDK's warnings (a setting a provider ignores) go to stderr, not
// among the checks' lines.
globalThis.AI_SDK_LOG_WARNINGS = ({ warnings, provider, model }) =>
  console.error(`AI SDK warning (${provider} ${model}): ${JSON.stringify(warnings)}`);

const ANSWER = 'Paris is the capital of France.';
const oai = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0 });
const oaiBadKey = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'not-a-key', maxRetries: 0 });
const ant = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0 });
const antBadKey = new Anthropic({ baseURL: base, apiKey: 'not-a-key', maxRetries: 0 });
const vOpenAI = createOpenAI({ baseURL: `${base}/v1`, apiKey: key });
const vOpenAIBadKey = createOpenAI({ baseURL: `${base}/v1`, apiKey: 'not-a-key' });
const vAnthropic = createAnthropic({ baseURL: `${base}/v1`, apiKey: key });

const checks = [];
const check = (name, fn) => checks.push([name, fn]);

// rejects awaits fn's failure and checks it is an instance of cls with the
// HTTP status, then hands it to more.
async function rejects(fn, cls, status, more = () => {}) {
  let err;
  try {
    await fn();
  } catch (e) {
    err = e;
  }
  assert.ok(err, `no error: want ${cls.name} ${status}`);
  assert.ok(err instanceof cls, `want ${cls.name}, got ${err?.constructor?.name}: ${err?.message}`);
  assert.equal(err.status ?? err.statusCode, status, err.message);
  more(err);
}

const messages = [{ role: 'user', content: 'Capital of France?' }];
const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

// The vector of input i at dimension j, as the mock embeds.
const want = (i, dims) => Array.from({ length: dims }, (_, j) => i + 1 + j / 8);
const fromBase64 = (s) => {
  const b = Buffer.from(s, 'base64');
  return Array.from(new Float32Array(b.buffer, b.byteOffset, b.length / 4));
};

// ---- openai-node: chat.completions ----

check('openai-node chat.completions json', async () => {
  const { data, response } = await oai.chat.completions.create({ model: 'gpt', messages }).withResponse();
  assert.equal(data.object, 'chat.completion');
  assert.equal(data.choices[0].message.content, ANSWER);
  assert.equal(data.choices[0].finish_reason, 'stop');
  assert.equal(data.model, 'gpt');
  assert.equal(data.usage.prompt_tokens, 11);
  assert.equal(response.headers.get('x-retryhost-model'), 'gpt');
});

check('openai-node chat.completions stream', async () => {
  const stream = await oai.chat.completions.create({
    model: 'gpt', messages, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    for (const c of chunk.choices) {
      text += c.delta.content ?? '';
      finish = c.finish_reason ?? finish;
    }
    usage = chunk.usage ?? usage;
  }
  assert.equal(text, ANSWER);
  assert.equal(finish, 'stop');
  assert.equal(usage?.prompt_tokens, 11);
});

check('openai-node chat.completions stream helper', async () => {
  const stream = oai.chat.completions.stream({ model: 'claude', messages });
  const final = await stream.finalChatCompletion();
  assert.equal(final.choices[0].message.content, ANSWER);
  assert.equal(final.model, 'claude');
});

check('openai-node chat.completions tool call', async () => {
  const c = await oai.chat.completions.create({ model: 'gpt', messages, tools: [weatherTool] });
  const call = c.choices[0].message.tool_calls?.[0];
  assert.equal(c.choices[0].finish_reason, 'tool_calls');
  assert.equal(call?.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris' });
});

check('openai-node chat.completions tool call stream from Anthropic', async () => {
  const stream = oai.chat.completions.stream({ model: 'claude', messages, tools: [weatherTool] });
  const final = await stream.finalChatCompletion();
  const call = final.choices[0].message.tool_calls?.[0];
  assert.equal(final.choices[0].finish_reason, 'tool_calls');
  assert.equal(call?.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris' });
});

check('openai-node chat.completions fail-over', async () => {
  const { data, response } = await oai.chat.completions
    .create({ model: 'gpt-down', messages, fallbacks: ['claude'] })
    .withResponse();
  assert.equal(data.choices[0].message.content, ANSWER);
  assert.equal(data.model, 'claude');
  assert.equal(response.headers.get('x-retryhost-model'), 'claude');
  assert.equal(response.headers.get('x-retryhost-attempts'), '2');
});

check('openai-node chat.completions stream fail-over', async () => {
  const stream = await oai.chat.completions.create({ model: 'gpt-limited', messages, stream: true, fallbacks: ['gpt'] });
  let text = '';
  for await (const chunk of stream) {
    assert.equal(chunk.model, 'gpt');
    text += chunk.choices[0]?.delta.content ?? '';
  }
  assert.equal(text, ANSWER);
});

check('openai-node chat.completions 401', () =>
  rejects(() => oaiBadKey.chat.completions.create({ model: 'gpt', messages }), OpenAI.AuthenticationError, 401, (e) => {
    assert.equal(e.code, 'invalid_api_key');
    assert.ok(e.requestID, 'a request id');
    assert.ok(e.error?.message, 'a message');
  }));

check('openai-node chat.completions 429', () =>
  rejects(() => oai.chat.completions.create({ model: 'gpt-limited', messages }), OpenAI.RateLimitError, 429, (e) => {
    assert.equal(e.headers.get('retry-after'), '7');
    assert.match(e.message, /Rate limit reached/);
  }));

check('openai-node chat.completions 429 stream', () =>
  rejects(async () => {
    const s = await oai.chat.completions.create({ model: 'gpt-limited', messages, stream: true });
    for await (const _ of s);
  }, OpenAI.RateLimitError, 429));

check('openai-node chat.completions 400', () =>
  rejects(() => oai.chat.completions.create({ model: 'gpt', messages, n: 2 }), OpenAI.BadRequestError, 400, (e) => {
    assert.equal(e.type, 'invalid_request_error');
    assert.equal(e.param, 'n');
  }));

check('openai-node chat.completions 400 from the upstream', () =>
  rejects(() => oai.chat.completions.create({ model: 'gpt-bad', messages }), OpenAI.BadRequestError, 400, (e) => {
    assert.equal(e.code, 'string_above_max_length');
    assert.equal(e.param, 'messages[0].content');
  }));

check('openai-node chat.completions 404', () =>
  rejects(() => oai.chat.completions.create({ model: 'nope', messages }), OpenAI.NotFoundError, 404, (e) => {
    assert.equal(e.code, 'model_not_found');
  }));

check('openai-node chat.completions 502 every model down', () =>
  rejects(() => oai.chat.completions.create({ model: 'gpt-down', messages }), OpenAI.InternalServerError, 502));

check('openai-node chat.completions stream cut after its first content', async () => {
  const stream = await oai.chat.completions.create({ model: 'gpt-cut', messages, stream: true });
  let text = '';
  await assert.rejects(async () => {
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
  }, (e) => e instanceof OpenAI.APIError && e.status === undefined && /./.test(e.message));
  assert.equal(text, 'Paris', 'what came before the cut, and no more');
});

// gpt-hang sends its first content and then nothing until the request is
// cancelled: the client aborts after the first content, and the test sees
// the cancellation reach the upstream.
check('openai-node chat.completions stream aborted by the client', async () => {
  const stream = await oai.chat.completions.create({ model: 'gpt-hang', messages, stream: true });
  let text = '';
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta.content ?? '';
    if (text) stream.controller.abort();
  }
  assert.equal(text, 'Paris');
});

check('openai-node chat.completions 502 cut', () =>
  rejects(() => oai.chat.completions.create({ model: 'gpt-cut', messages }), OpenAI.InternalServerError, 502));

// ---- openai-node: responses ----

const input = 'Capital of France?';

check('openai-node responses json', async () => {
  const r = await oai.responses.create({ model: 'gpt', input, instructions: 'Answer briefly.' });
  assert.equal(r.object, 'response');
  assert.equal(r.status, 'completed');
  assert.equal(r.output_text, ANSWER);
  assert.equal(r.model, 'gpt');
  assert.equal(r.usage?.input_tokens, 11);
  assert.equal(r.output[0].type, 'message');
  assert.equal(r.output[0].content[0].type, 'output_text');
});

check('openai-node responses json from Anthropic', async () => {
  const r = await oai.responses.create({ model: 'claude', input: [{ role: 'user', content: input }] });
  assert.equal(r.output_text, ANSWER);
  assert.equal(r.model, 'claude');
});

check('openai-node responses stream', async () => {
  const stream = await oai.responses.create({ model: 'gpt', input, stream: true });
  const types = [];
  let seq = -1;
  let delta = '';
  let done = null;
  for await (const ev of stream) {
    assert.equal(ev.sequence_number, seq + 1, `${ev.type}: sequence numbers count up from 0`);
    seq = ev.sequence_number;
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') delta += ev.delta;
    if (ev.type === 'response.output_text.done') assert.equal(ev.text, ANSWER);
    if (ev.type === 'response.completed') done = ev.response;
  }
  assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
  assert.deepEqual(types.slice(-4), ['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed']);
  assert.equal(delta, ANSWER);
  assert.equal(done?.status, 'completed');
  assert.equal(done?.output[0]?.content[0]?.text, ANSWER);
  assert.equal(done?.usage?.input_tokens, 11);
});

// The text of a response's messages (output_text is a convenience that
// create adds and a stream's finalResponse does not).
const textOf = (r) => r.output.filter((o) => o.type === 'message')
  .flatMap((o) => o.content).filter((c) => c.type === 'output_text').map((c) => c.text).join('');

check('openai-node responses stream helper from Anthropic', async () => {
  const stream = oai.responses.stream({ model: 'claude', input });
  let delta = '';
  stream.on('response.output_text.delta', (ev) => { delta += ev.delta; });
  const final = await stream.finalResponse();
  assert.equal(textOf(final), ANSWER);
  assert.equal(final.status, 'completed');
  assert.equal(delta, ANSWER);
});

const responsesTool = {
  type: 'function', name: 'get_weather', description: 'The weather in a city', strict: false,
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

check('openai-node responses function call', async () => {
  const r = await oai.responses.create({ model: 'gpt', input, tools: [responsesTool] });
  const call = r.output.find((o) => o.type === 'function_call');
  assert.equal(call?.name, 'get_weather');
  assert.ok(call.call_id, 'a call_id');
  assert.deepEqual(JSON.parse(call.arguments), { city: 'Paris' });
});

check('openai-node responses function call stream', async () => {
  const stream = await oai.responses.create({ model: 'claude', input, tools: [responsesTool], stream: true });
  let args = '';
  let doneArgs = null;
  let final = null;
  for await (const ev of stream) {
    if (ev.type === 'response.function_call_arguments.delta') args += ev.delta;
    if (ev.type === 'response.function_call_arguments.done') doneArgs = ev.arguments;
    if (ev.type === 'response.completed') final = ev.response;
  }
  assert.deepEqual(JSON.parse(args), { city: 'Paris' });
  assert.equal(doneArgs, args);
  const call = final?.output.find((o) => o.type === 'function_call');
  assert.equal(call?.name, 'get_weather');
  assert.equal(call?.arguments, args);
});

check('openai-node responses input items', async () => {
  const r = await oai.responses.create({
    model: 'claude',
    input: [
      { role: 'developer', content: 'Answer briefly.' },
      { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Capital of France?' }] },
      { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Paris.' }] },
      { role: 'user', content: 'Say it again.' },
    ],
    max_output_tokens: 64, temperature: 0.2,
  });
  assert.equal(r.output_text, ANSWER);
});

check('openai-node responses function call output round trip', async () => {
  const r = await oai.responses.create({
    model: 'claude',
    input: [
      { role: 'user', content: 'Weather in Paris?' },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { type: 'function_call_output', call_id: 'call_1', output: 'sunny' },
    ],
    tools: [responsesTool],
  });
  assert.equal(r.status, 'completed');
});

check('openai-node responses fail-over', async () => {
  const { data, response } = await oai.responses
    .create({ model: 'gpt-down', input, fallbacks: ['claude'] })
    .withResponse();
  assert.equal(data.output_text, ANSWER);
  assert.equal(data.model, 'claude');
  assert.equal(response.headers.get('x-retryhost-model'), 'claude');
  assert.equal(response.headers.get('x-retryhost-attempts'), '2');
});

check('openai-node responses stream fail-over', async () => {
  const stream = oai.responses.stream({ model: 'claude-limited', input, fallbacks: ['gpt'] });
  const final = await stream.finalResponse();
  assert.equal(textOf(final), ANSWER);
  assert.equal(final.model, 'gpt');
});

check('openai-node responses stream cut after its first content', async () => {
  const stream = await oai.responses.create({ model: 'claude-cut', input, stream: true });
  const types = [];
  let seq = -1;
  let last = null;
  for await (const ev of stream) {
    assert.equal(ev.sequence_number, seq + 1, `${ev.type}: sequence numbers count up from 0`);
    seq = ev.sequence_number;
    types.push(ev.type);
    last = ev;
  }
  assert.ok(types.includes('response.output_text.delta'));
  assert.ok(!types.includes('response.completed'), 'a cut response does not complete');
  assert.equal(last?.type, 'error', `ends with an error event: ${types.join(' ')}`);
  assert.ok(last.message, 'the error event has a message');
});

check('openai-node responses stream aborted by the client', async () => {
  const stream = await oai.responses.create({ model: 'gpt-hang', input, stream: true });
  let text = '';
  for await (const ev of stream) {
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (text) stream.controller.abort();
  }
  assert.equal(text, 'Paris');
});

check('openai-node responses stream helper cut after its first content', () =>
  assert.rejects(() => oai.responses.stream({ model: 'gpt-cut', input }).finalResponse()));

check('openai-node responses 502 cut', () =>
  rejects(() => oai.responses.create({ model: 'claude-cut', input }), OpenAI.InternalServerError, 502));

check('openai-node responses 401', () =>
  rejects(() => oaiBadKey.responses.create({ model: 'gpt', input }), OpenAI.AuthenticationError, 401, (e) => {
    assert.equal(e.code, 'invalid_api_key');
  }));

check('openai-node responses 429', () =>
  rejects(() => oai.responses.create({ model: 'gpt-limited', input }), OpenAI.RateLimitError, 429, (e) => {
    assert.equal(e.headers.get('retry-after'), '7');
  }));

check('openai-node responses 429 stream', () =>
  rejects(async () => {
    const s = await oai.responses.create({ model: 'claude-limited', input, stream: true });
    for await (const _ of s);
  }, OpenAI.RateLimitError, 429));

check('openai-node responses stateful to the one account', async () => {
  const r = await oai.responses.create({ model: 'gpt', input, previous_response_id: 'resp_1', store: true });
  assert.equal(r.id, 'resp_up');
  assert.equal(r.previous_response_id, 'resp_1');
  assert.equal(r.output_text, ANSWER);
  const got = await oai.responses.retrieve('resp_up');
  assert.equal(got.id, 'resp_up');
});

check('openai-node responses 400 stateful', () =>
  rejects(() => oai.responses.create({ model: 'claude', input, previous_response_id: 'resp_1' }), OpenAI.BadRequestError, 400, (e) => {
    assert.equal(e.type, 'invalid_request_error');
    assert.equal(e.param, 'previous_response_id');
    assert.match(e.message, /is not one OpenAI account/);
  }));

check('openai-node responses 400 unsupported field', () =>
  rejects(() => oai.responses.create({ model: 'gpt', input, truncation: 'auto' }), OpenAI.BadRequestError, 400, (e) => {
    assert.equal(e.param, 'truncation');
  }));

check('openai-node responses 404', () =>
  rejects(() => oai.responses.create({ model: 'nope', input }), OpenAI.NotFoundError, 404, (e) => {
    assert.equal(e.code, 'model_not_found');
  }));

// ---- openai-node: embeddings ----

check('openai-node embeddings float', async () => {
  const r = await oai.embeddings.create({ model: 'emb', input: ['Paris', 'Lyon'], encoding_format: 'float' });
  assert.equal(r.object, 'list');
  assert.equal(r.data.length, 2);
  r.data.forEach((d, i) => {
    assert.equal(d.index, i);
    assert.deepEqual(d.embedding, want(i, 8));
  });
  assert.equal(r.usage.total_tokens, 5);
});

check('openai-node embeddings base64', async () => {
  const r = await oai.embeddings.create({ model: 'emb', input: ['Paris', 'Lyon'], encoding_format: 'base64' });
  r.data.forEach((d, i) => {
    assert.equal(typeof d.embedding, 'string', 'asked for base64, the SDK hands it over as it came');
    assert.deepEqual(fromBase64(d.embedding), want(i, 8));
  });
});

check('openai-node embeddings default encoding', async () => {
  // The SDK asks for base64 and decodes it when the caller names no format.
  const r = await oai.embeddings.create({ model: 'emb', input: 'Paris' });
  assert.deepEqual(Array.from(r.data[0].embedding), want(0, 8));
});

check('openai-node embeddings dimensions', async () => {
  const r = await oai.embeddings.create({ model: 'emb', input: ['a', 'b', 'c'], dimensions: 4 });
  assert.equal(r.data.length, 3);
  r.data.forEach((d, i) => assert.deepEqual(Array.from(d.embedding), want(i, 4)));
});

check('openai-node embeddings token input', async () => {
  const r = await oai.embeddings.create({ model: 'emb', input: [[1, 2], [3]], encoding_format: 'float' });
  assert.equal(r.data.length, 2);
});

check('openai-node embeddings fail-over', async () => {
  const { data, response } = await oai.embeddings.create({ model: 'emb-group', input: 'Paris' }).withResponse();
  assert.deepEqual(Array.from(data.data[0].embedding), want(0, 8));
  assert.equal(response.headers.get('x-retryhost-model'), 'emb');
  assert.equal(response.headers.get('x-retryhost-attempts'), '2');
});

check('openai-node embeddings 401', () =>
  rejects(() => oaiBadKey.embeddings.create({ model: 'emb', input: 'x' }), OpenAI.AuthenticationError, 401, (e) => {
    assert.equal(e.code, 'invalid_api_key');
  }));

check('openai-node embeddings 429', () =>
  rejects(() => oai.embeddings.create({ model: 'emb-limited', input: 'x' }), OpenAI.RateLimitError, 429, (e) => {
    assert.equal(e.headers.get('retry-after'), '7');
    assert.equal(e.code, 'rate_limit_exceeded');
  }));

check('openai-node embeddings 400 encoding_format', () =>
  rejects(() => oai.embeddings.create({ model: 'emb', input: 'x', encoding_format: 'int8' }), OpenAI.BadRequestError, 400, (e) => {
    assert.equal(e.type, 'invalid_request_error');
    assert.equal(e.param, 'encoding_format');
  }));

check('openai-node embeddings 400 dimensions', () =>
  rejects(() => oai.embeddings.create({ model: 'emb', input: 'x', dimensions: 4096 }), OpenAI.BadRequestError, 400, (e) => {
    assert.equal(e.param, 'dimensions');
  }));

check('openai-node embeddings 404', () =>
  rejects(() => oai.embeddings.create({ model: 'nope', input: 'x' }), OpenAI.NotFoundError, 404, (e) => {
    assert.equal(e.code, 'model_not_found');
  }));

// ---- openai-node: models ----

check('openai-node models list', async () => {
  const ids = [];
  for await (const m of oai.models.list()) ids.push(m.id);
  for (const id of ['gpt', 'claude', 'emb', 'emb-group']) assert.ok(ids.includes(id), `${id} in ${ids}`);
});

check('openai-node models retrieve', async () => {
  const m = await oai.models.retrieve('claude');
  assert.equal(m.id, 'claude');
  assert.equal(m.object, 'model');
  await rejects(() => oai.models.retrieve('nope'), OpenAI.NotFoundError, 404);
});

// ---- Anthropic's SDK: messages ----

check('anthropic-sdk messages json', async () => {
  const { data, response } = await ant.messages.create({ model: 'claude', max_tokens: 256, messages }).withResponse();
  assert.equal(data.type, 'message');
  assert.equal(data.role, 'assistant');
  assert.equal(data.content[0].type, 'text');
  assert.equal(data.content[0].text, ANSWER);
  assert.equal(data.stop_reason, 'end_turn');
  assert.equal(data.model, 'claude');
  assert.equal(data.usage.input_tokens, 14);
  assert.equal(response.headers.get('x-retryhost-model'), 'claude');
});

check('anthropic-sdk messages request id', async () => {
  const { request_id } = await ant.messages.create({ model: 'claude', max_tokens: 256, messages }).withResponse();
  assert.ok(request_id, 'the request-id header the SDK reads');
  await rejects(() => ant.messages.create({ model: 'nope', max_tokens: 256, messages }), Anthropic.NotFoundError, 404, (e) => {
    assert.ok(e.requestID, 'an error carries the request id too');
  });
});

check('anthropic-sdk messages system blocks and content blocks', async () => {
  for (const model of ['claude', 'gpt']) {
    const m = await ant.messages.create({
      model, max_tokens: 256,
      system: [{ type: 'text', text: 'Answer briefly.', cache_control: { type: 'ephemeral' } }],
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'Capital of France?' }] },
        { role: 'assistant', content: [{ type: 'text', text: 'Paris.' }] },
        { role: 'user', content: 'Say it again.' },
      ],
    });
    assert.equal(m.content[0].text, ANSWER, model);
  }
});

check('anthropic-sdk messages tool result round trip', async () => {
  for (const model of ['claude', 'gpt']) {
    const m = await ant.messages.create({
      model, max_tokens: 256, tools: [antTool],
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny' }] },
      ],
    });
    assert.equal(m.type, 'message', model);
  }
});

check('anthropic-sdk models', async () => {
  const ids = [];
  for await (const m of ant.models.list()) ids.push(m.id);
  assert.ok(ids.includes('claude'), `claude in ${ids}`);
  const m = await ant.models.retrieve('claude');
  assert.equal(m.id, 'claude');
  assert.equal(m.type, 'model');
  await rejects(() => ant.models.retrieve('nope'), Anthropic.NotFoundError, 404);
});

check('anthropic-sdk messages json from OpenAI', async () => {
  const m = await ant.messages.create({ model: 'gpt', max_tokens: 256, system: 'Answer briefly.', messages });
  assert.equal(m.content[0].text, ANSWER);
  assert.equal(m.stop_reason, 'end_turn');
  assert.equal(m.model, 'gpt');
});

check('anthropic-sdk messages stream', async () => {
  const stream = await ant.messages.create({ model: 'claude', max_tokens: 256, messages, stream: true });
  const types = [];
  let text = '';
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') text += ev.delta.text;
  }
  assert.equal(types[0], 'message_start');
  assert.equal(types.at(-1), 'message_stop');
  assert.ok(types.includes('message_delta'));
  assert.equal(text, ANSWER);
});

check('anthropic-sdk messages stream helper from OpenAI', async () => {
  const stream = ant.messages.stream({ model: 'gpt', max_tokens: 256, messages });
  let text = '';
  stream.on('text', (t) => { text += t; });
  const final = await stream.finalMessage();
  assert.equal(text, ANSWER);
  assert.equal(final.content[0].text, ANSWER);
  assert.equal(final.stop_reason, 'end_turn');
  assert.equal(final.usage.output_tokens, 3);
});

const antTool = {
  name: 'get_weather', description: 'The weather in a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

check('anthropic-sdk messages tool use', async () => {
  const m = await ant.messages.create({ model: 'claude', max_tokens: 256, messages, tools: [antTool] });
  assert.equal(m.stop_reason, 'tool_use');
  const use = m.content.find((b) => b.type === 'tool_use');
  assert.equal(use?.name, 'get_weather');
  assert.deepEqual(use.input, { city: 'Paris' });
});

check('anthropic-sdk messages tool use stream from OpenAI', async () => {
  const final = await ant.messages.stream({ model: 'gpt', max_tokens: 256, messages, tools: [antTool] }).finalMessage();
  assert.equal(final.stop_reason, 'tool_use');
  const use = final.content.find((b) => b.type === 'tool_use');
  assert.equal(use?.name, 'get_weather');
  assert.deepEqual(use.input, { city: 'Paris' });
});

check('anthropic-sdk messages fail-over', async () => {
  const { data, response } = await ant.messages
    .create({ model: 'claude-down', max_tokens: 256, messages, fallbacks: ['gpt'] })
    .withResponse();
  assert.equal(data.content[0].text, ANSWER);
  assert.equal(data.model, 'gpt');
  assert.equal(response.headers.get('x-retryhost-model'), 'gpt');
  assert.equal(response.headers.get('x-retryhost-attempts'), '2');
});

check('anthropic-sdk messages stream fail-over', async () => {
  const final = await ant.messages
    .stream({ model: 'claude-limited', max_tokens: 256, messages, fallbacks: ['claude'] })
    .finalMessage();
  assert.equal(final.content[0].text, ANSWER);
  assert.equal(final.model, 'claude');
});

check('anthropic-sdk messages stream cut after its first content', async () => {
  const stream = ant.messages.stream({ model: 'claude-cut', max_tokens: 256, messages });
  let text = '';
  stream.on('text', (t) => { text += t; });
  await assert.rejects(() => stream.finalMessage(), (e) => e instanceof Anthropic.APIError && typeof e.type === 'string');
  assert.equal(text, 'Paris');
});

check('anthropic-sdk messages stream aborted by the client', async () => {
  const stream = await ant.messages.create({ model: 'gpt-hang', max_tokens: 256, messages, stream: true });
  let text = '';
  for await (const ev of stream) {
    if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') text += ev.delta.text;
    if (text) stream.controller.abort();
  }
  assert.equal(text, 'Paris');
});

check('anthropic-sdk messages stream cut from OpenAI', async () => {
  const stream = await ant.messages.create({ model: 'gpt-cut', max_tokens: 256, messages, stream: true });
  const types = [];
  await assert.rejects(async () => {
    for await (const ev of stream) types.push(ev.type);
  }, (e) => e instanceof Anthropic.APIError && typeof e.type === 'string');
  assert.ok(types.includes('content_block_delta'));
  assert.ok(!types.includes('message_stop'));
});

check('anthropic-sdk messages 502 cut', () =>
  rejects(() => ant.messages.create({ model: 'claude-cut', max_tokens: 256, messages }), Anthropic.InternalServerError, 502, (e) => {
    assert.equal(e.error?.type, 'error');
  }));

check('anthropic-sdk messages 401', () =>
  rejects(() => antBadKey.messages.create({ model: 'claude', max_tokens: 256, messages }), Anthropic.AuthenticationError, 401, (e) => {
    assert.equal(e.type, 'authentication_error');
    assert.ok(e.requestID, 'a request id');
    assert.equal(e.error?.type, 'error');
  }));

check('anthropic-sdk messages 429', () =>
  rejects(() => ant.messages.create({ model: 'claude-limited', max_tokens: 256, messages }), Anthropic.RateLimitError, 429, (e) => {
    assert.equal(e.type, 'rate_limit_error');
    assert.equal(e.headers.get('retry-after'), '7');
    assert.match(e.apiMessage ?? '', /rate limit/);
  }));

check('anthropic-sdk messages 429 from OpenAI', () =>
  rejects(() => ant.messages.create({ model: 'gpt-limited', max_tokens: 256, messages }), Anthropic.RateLimitError, 429, (e) => {
    assert.equal(e.type, 'rate_limit_error');
    assert.equal(e.headers.get('retry-after'), '7');
  }));

check('anthropic-sdk messages 429 stream', () =>
  rejects(() => ant.messages.stream({ model: 'claude-limited', max_tokens: 256, messages }).finalMessage(), Anthropic.RateLimitError, 429, (e) => {
    assert.equal(e.type, 'rate_limit_error');
  }));

check('anthropic-sdk messages 400', () =>
  rejects(() => ant.messages.create({ model: 'claude', messages }), Anthropic.BadRequestError, 400, (e) => {
    assert.equal(e.type, 'invalid_request_error');
    assert.match(e.apiMessage ?? '', /max_tokens/);
  }));

check('anthropic-sdk messages 400 from OpenAI upstream', () =>
  rejects(() => ant.messages.create({ model: 'gpt-bad', max_tokens: 256, messages }), Anthropic.BadRequestError, 400, (e) => {
    assert.equal(e.type, 'invalid_request_error');
    assert.match(e.apiMessage ?? '', /string too long/);
  }));

check('anthropic-sdk messages 404', () =>
  rejects(() => ant.messages.create({ model: 'nope', max_tokens: 256, messages }), Anthropic.NotFoundError, 404, (e) => {
    assert.equal(e.type, 'not_found_error');
  }));

check('anthropic-sdk messages 502 every model down', () =>
  rejects(() => ant.messages.create({ model: 'claude-down', max_tokens: 256, messages }), Anthropic.InternalServerError, 502, (e) => {
    assert.equal(e.type, 'overloaded_error');
  }));

// ---- Anthropic's SDK: count_tokens ----

check('anthropic-sdk messages.count_tokens json', async () => {
  const r = await ant.messages.countTokens({ model: 'claude', messages, system: 'Answer briefly.' });
  assert.equal(r.input_tokens, 14);
});

check('anthropic-sdk beta messages', async () => {
  const m = await ant.beta.messages.create({ model: 'claude', max_tokens: 256, messages, betas: ['context-management-2025-06-27'] });
  assert.equal(m.content[0].text, ANSWER);
  const c = await ant.beta.messages.countTokens({ model: 'claude', messages });
  assert.equal(c.input_tokens, 15, 'the beta header reached the upstream');
});

// The tool runner threads its turns (Anthropic's message threads, held by
// the server) unless the server refuses threads, as the gateway does: it
// then sends every turn whole, on any route.
for (const model of ['claude', 'gpt']) {
  check(`anthropic-sdk beta tool runner on ${model}`, async () => {
    const runner = ant.beta.messages.toolRunner({
      model, max_tokens: 256, messages, max_iterations: 2,
      tools: [{ ...antTool, run: async ({ city }) => `sunny in ${city}` }],
    });
    let turns = 0;
    for await (const m of runner) {
      turns++;
      assert.equal(m.stop_reason, 'tool_use', `turn ${turns}`);
    }
    assert.equal(turns, 2);
  });
}

check('anthropic-sdk beta messages 400 thread', () =>
  rejects(() => ant.beta.messages.create({ model: 'claude', max_tokens: 256, messages, thread: { type: 'create' } }), Anthropic.BadRequestError, 400, (e) => {
    assert.equal(e.type, 'invalid_request_error');
    assert.equal(e.error?.error?.details?.error_code, 'thread_unsupported_request');
  }));

check('anthropic-sdk messages.count_tokens fail-over', async () => {
  const { data, response } = await ant.messages.countTokens({ model: 'count-group', messages }).withResponse();
  assert.equal(data.input_tokens, 14);
  assert.equal(response.headers.get('x-retryhost-model'), 'claude');
  assert.equal(response.headers.get('x-retryhost-attempts'), '2');
});

check('anthropic-sdk messages.count_tokens 401', () =>
  rejects(() => antBadKey.messages.countTokens({ model: 'claude', messages }), Anthropic.AuthenticationError, 401, (e) => {
    assert.equal(e.type, 'authentication_error');
  }));

check('anthropic-sdk messages.count_tokens 429', () =>
  rejects(() => ant.messages.countTokens({ model: 'claude-limited', messages }), Anthropic.RateLimitError, 429, (e) => {
    assert.equal(e.type, 'rate_limit_error');
    assert.equal(e.headers.get('retry-after'), '7');
  }));

check('anthropic-sdk messages.count_tokens 400 no Anthropic model', () =>
  rejects(() => ant.messages.countTokens({ model: 'gpt', messages }), Anthropic.BadRequestError, 400, (e) => {
    assert.equal(e.type, 'invalid_request_error');
  }));

check('anthropic-sdk messages.count_tokens 404', () =>
  rejects(() => ant.messages.countTokens({ model: 'nope', messages }), Anthropic.NotFoundError, 404, (e) => {
    assert.equal(e.type, 'not_found_error');
  }));

// ---- a stop for length, on every door, from both providers ----
// The mocks stop for length when the request's output limit is 3.

for (const model of ['gpt', 'claude']) {
  check(`openai-node chat.completions length stop from ${model}`, async () => {
    const c = await oai.chat.completions.create({ model, messages, max_completion_tokens: 3 });
    assert.equal(c.choices[0].finish_reason, 'length');
    const s = await oai.chat.completions.stream({ model, messages, max_tokens: 3 }).finalChatCompletion();
    assert.equal(s.choices[0].finish_reason, 'length');
  });

  check(`openai-node responses length stop from ${model}`, async () => {
    const r = await oai.responses.create({ model, input, max_output_tokens: 3 });
    assert.equal(r.status, 'incomplete');
    assert.equal(r.incomplete_details?.reason, 'max_output_tokens');
    const stream = await oai.responses.create({ model, input, max_output_tokens: 3, stream: true });
    let last = null;
    for await (const ev of stream) last = ev;
    assert.equal(last?.type, 'response.incomplete');
    assert.equal(last.response.incomplete_details?.reason, 'max_output_tokens');
  });

  check(`anthropic-sdk messages length stop from ${model}`, async () => {
    const m = await ant.messages.create({ model, max_tokens: 3, messages });
    assert.equal(m.stop_reason, 'max_tokens');
    const s = await ant.messages.stream({ model, max_tokens: 3, messages }).finalMessage();
    assert.equal(s.stop_reason, 'max_tokens');
  });

  check(`ai-sdk/openai responses length stop from ${model}`, async () => {
    const r = await generateText({ model: vOpenAI.responses(model), prompt, maxOutputTokens: 3, maxRetries: 0 });
    assert.equal(r.finishReason, 'length');
  });
}

// ---- the Vercel AI SDK ----

const prompt = 'Capital of France?';

check('ai-sdk/openai responses generateText', async () => {
  const r = await generateText({ model: vOpenAI('gpt'), prompt, maxRetries: 0 });
  assert.equal(r.text, ANSWER);
  assert.equal(r.finishReason, 'stop');
  assert.equal(r.usage.inputTokens, 11);
});

check('ai-sdk/openai responses streamText', async () => {
  const r = streamText({ model: vOpenAI.responses('claude'), prompt, maxRetries: 0, onError: () => {} });
  let text = '';
  for await (const t of r.textStream) text += t;
  assert.equal(text, ANSWER);
  assert.equal(await r.finishReason, 'stop');
});

const vTools = {
  get_weather: tool({
    description: 'The weather in a city',
    inputSchema: jsonSchema({ type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }),
  }),
};

check('ai-sdk/openai responses tool call', async () => {
  const r = await generateText({ model: vOpenAI.responses('gpt'), prompt, tools: vTools, maxRetries: 0 });
  assert.equal(r.toolCalls[0]?.toolName, 'get_weather');
  assert.deepEqual(r.toolCalls[0].input, { city: 'Paris' });
});

const vToolsRun = {
  get_weather: tool({
    description: 'The weather in a city',
    inputSchema: jsonSchema({ type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }),
    execute: async ({ city }) => `sunny in ${city}`,
  }),
};

check('ai-sdk/openai responses tool loop', async () => {
  const r = await generateText({
    model: vOpenAI.responses('claude'), prompt, tools: vToolsRun, stopWhen: stepCountIs(2), maxRetries: 0,
    providerOptions: { openai: { store: false } },
  });
  assert.equal(r.steps.length, 2);
  assert.equal(r.steps[0].toolResults[0]?.output, 'sunny in Paris');
});

check('ai-sdk/openai responses conversation', async () => {
  const opts = { providerOptions: { openai: { store: false } }, maxRetries: 0 };
  const first = await generateText({ model: vOpenAI.responses('gpt'), prompt, ...opts });
  const next = await generateText({
    model: vOpenAI.responses('gpt'), ...opts,
    messages: [{ role: 'user', content: prompt }, ...first.response.messages, { role: 'user', content: 'Say it again.' }],
  });
  assert.equal(next.text, ANSWER);
});

check('ai-sdk/openai responses item_reference to the one account', async () => {
  // By default the provider refers to the items of earlier responses by
  // id: a stateful request, which a route of one OpenAI account takes.
  const first = await generateText({ model: vOpenAI.responses('gpt'), prompt, maxRetries: 0 });
  const next = await generateText({
    model: vOpenAI.responses('gpt'), maxRetries: 0,
    messages: [{ role: 'user', content: prompt }, ...first.response.messages, { role: 'user', content: 'Say it again.' }],
  });
  assert.equal(next.text, ANSWER);
  assert.equal(next.response.id, 'resp_up', "the account's own response, forwarded");
});

check('ai-sdk/openai responses 400 item_reference', async () => {
  // On a route of another provider only the items themselves will do.
  const first = await generateText({ model: vOpenAI.responses('claude'), prompt, maxRetries: 0 });
  await rejects(() => generateText({
    model: vOpenAI.responses('claude'), maxRetries: 0,
    messages: [{ role: 'user', content: prompt }, ...first.response.messages, { role: 'user', content: 'Say it again.' }],
  }), APICallError, 400, (e) => {
    assert.match(e.message, /store false/, 'the refusal says what to do');
  });
});

check('ai-sdk/openai chat.completions generateText', async () => {
  const r = await generateText({ model: vOpenAI.chat('claude'), prompt, maxRetries: 0 });
  assert.equal(r.text, ANSWER);
  assert.equal(r.finishReason, 'stop');
});

check('ai-sdk/openai chat.completions streamText', async () => {
  const r = streamText({ model: vOpenAI.chat('gpt'), prompt, maxRetries: 0, onError: () => {} });
  let text = '';
  for await (const t of r.textStream) text += t;
  assert.equal(text, ANSWER);
  assert.equal((await r.usage).inputTokens, 11);
});

check('ai-sdk/openai chat.completions streamText cut', async () => {
  const r = streamText({ model: vOpenAI.chat('gpt-cut'), prompt, maxRetries: 0, onError: () => {} });
  const parts = [];
  for await (const p of r.fullStream) parts.push(p.type);
  assert.ok(parts.includes('error'), `an error part: ${parts.join(' ')}`);
  assert.ok(!parts.includes('finish-step') || (await r.finishReason) !== 'stop', 'not a clean stop');
});

check('ai-sdk/openai responses streamText cut', async () => {
  const r = streamText({ model: vOpenAI.responses('claude-cut'), prompt, maxRetries: 0, onError: () => {} });
  const parts = [];
  for await (const p of r.fullStream) parts.push(p.type);
  assert.ok(parts.includes('error'), `an error part: ${parts.join(' ')}`);
});

check('ai-sdk/openai embeddings embed', async () => {
  const r = await embed({ model: vOpenAI.embedding('emb'), value: 'Paris', maxRetries: 0 });
  assert.deepEqual(r.embedding, want(0, 8));
});

check('ai-sdk/openai embeddings embedMany dimensions', async () => {
  const r = await embedMany({
    model: vOpenAI.embedding('emb-group'), values: ['Paris', 'Lyon'], maxRetries: 0,
    providerOptions: { openai: { dimensions: 4 } },
  });
  assert.deepEqual(r.embeddings, [want(0, 4), want(1, 4)]);
});

check('ai-sdk/openai responses 429', () =>
  rejects(() => generateText({ model: vOpenAI('gpt-limited'), prompt, maxRetries: 0 }), APICallError, 429, (e) => {
    assert.equal(e.isRetryable, true);
    assert.equal(e.responseHeaders?.['retry-after'], '7');
  }));

check('ai-sdk/openai chat.completions 401', () =>
  rejects(() => generateText({ model: vOpenAIBadKey.chat('gpt'), prompt, maxRetries: 0 }), APICallError, 401, (e) => {
    assert.equal(e.isRetryable, false);
  }));

check('ai-sdk/openai embeddings 400', () =>
  rejects(() => embed({ model: vOpenAI.embedding('emb'), value: 'x', maxRetries: 0, providerOptions: { openai: { dimensions: 4096 } } }), APICallError, 400));

check('ai-sdk/anthropic messages generateText', async () => {
  const r = await generateText({ model: vAnthropic('claude'), prompt, maxRetries: 0 });
  assert.equal(r.text, ANSWER);
  assert.equal(r.finishReason, 'stop');
});

check('ai-sdk/anthropic messages streamText from OpenAI', async () => {
  const r = streamText({ model: vAnthropic('gpt'), prompt, maxRetries: 0, onError: () => {} });
  let text = '';
  for await (const t of r.textStream) text += t;
  assert.equal(text, ANSWER);
});

check('ai-sdk/anthropic messages tool call stream from OpenAI', async () => {
  const r = streamText({ model: vAnthropic('gpt'), prompt, tools: vTools, maxRetries: 0, onError: () => {} });
  for await (const _ of r.fullStream);
  const calls = await r.toolCalls;
  assert.equal(calls[0]?.toolName, 'get_weather');
  assert.deepEqual(calls[0].input, { city: 'Paris' });
  assert.equal(await r.finishReason, 'tool-calls');
});

check('ai-sdk/anthropic messages 429', () =>
  rejects(() => generateText({ model: vAnthropic('claude-limited'), prompt, maxRetries: 0 }), APICallError, 429, (e) => {
    assert.equal(e.isRetryable, true);
  }));

for (const [name, fn] of checks) {
  try {
    await fn();
    console.log(`ok ${name}`);
  } catch (e) {
    console.log(`FAIL ${name}: ${String(e?.message ?? e).replace(/\s+/g, ' ').slice(0, 400)}`);
  }
}
console.log(`checks ${checks.length}`);
