// The official OpenAI SDK (npm "openai", 6.x) as a client of tokenringd's LLM
// proxy. Run by test/proxy_test.go (TestOpenAISDK) with:
//
//   TOKENRING_BASE_URL      the proxy's base URL, e.g. http://127.0.0.1:8080/v1
//   TOKENRING_API_KEY       a key of a tenant with room for two calls
//   TOKENRING_LIMITED_KEY   a key of a tenant allowed one request per window
//   TOKENRING_MODEL         the model to ask for
//
// It prints one JSON object with what it saw; the Go test asserts on it. Any
// unexpected failure exits non-zero with the error on stderr.
import OpenAI, { RateLimitError } from 'openai';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};

const baseURL = env('TOKENRING_BASE_URL');
const model = env('TOKENRING_MODEL');
const messages = [{ role: 'user', content: 'Say hello to the proxy, please.' }];
// maxRetries 0: a 429 must surface as an error, not be retried away.
const client = new OpenAI({ baseURL, apiKey: env('TOKENRING_API_KEY'), maxRetries: 0, timeout: 20_000 });
const limited = new OpenAI({ baseURL, apiKey: env('TOKENRING_LIMITED_KEY'), maxRetries: 0, timeout: 20_000 });

const pick = (headers, names) => Object.fromEntries(names.map((n) => [n, headers.get(n)]));
const rateHeaders = [
  'x-ratelimit-limit-requests', 'x-ratelimit-remaining-requests', 'x-ratelimit-reset-requests',
  'x-ratelimit-limit-tokens', 'x-ratelimit-remaining-tokens', 'x-ratelimit-reset-tokens',
  'ratelimit-policy', 'ratelimit',
];

const out = {};

// 1. Non-streaming.
{
  const { data, response } = await client.chat.completions
    .create({ model, messages, max_tokens: 50 })
    .withResponse();
  out.nonStreaming = {
    status: response.status,
    content: data.choices[0].message.content,
    usage: data.usage,
    headers: pick(response.headers, rateHeaders),
  };
}

// 2. Streaming, asking for the usage chunk.
{
  const { data: stream, response } = await client.chat.completions
    .create({ model, messages, max_tokens: 50, stream: true, stream_options: { include_usage: true } })
    .withResponse();
  let content = '';
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    content += chunk.choices[0]?.delta?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  out.streaming = { status: response.status, content, usage, chunks, headers: pick(response.headers, rateHeaders) };
}

// 3. Rate limited: the limited tenant's first call passes, its second is a 429.
{
  await limited.chat.completions.create({ model, messages, max_tokens: 5 });
  try {
    await limited.chat.completions.create({ model, messages, max_tokens: 5 });
    out.rateLimited = { error: 'no error' };
  } catch (err) {
    if (!(err instanceof RateLimitError)) throw err;
    out.rateLimited = {
      class: err.constructor.name,
      status: err.status,
      type: err.type,
      code: err.code,
      message: err.message,
      headers: pick(err.headers, ['retry-after', 'retry-after-ms', 'x-ratelimit-remaining-requests']),
    };
  }
}

console.log(JSON.stringify(out));
