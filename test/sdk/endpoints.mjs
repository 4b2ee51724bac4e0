// The official OpenAI SDK (npm "openai", 6.x) on the proxy's endpoints
// beside chat completions: the Responses API whole and streamed, an
// embedding, and the model list. Run by test/proxy_test.go
// (TestSDKEndpoints) with:
//
//   TOKENRING_BASE_URL      the proxy's base URL, e.g. http://127.0.0.1:8080/v1
//   TOKENRING_API_KEY       a key of a tenant with room for the calls
//   TOKENRING_MODEL         the model to ask for a response
//   TOKENRING_EMBED_MODEL   the model to ask for an embedding
//
// It prints one JSON object with what it saw; the Go test asserts on it. Any
// unexpected failure exits non-zero with the error on stderr.
import OpenAI from 'openai';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};

const model = env('TOKENRING_MODEL');
// maxRetries 0: every call reaches the proxy once, so the Go test knows
// what was charged.
const client = new OpenAI({ baseURL: env('TOKENRING_BASE_URL'), apiKey: env('TOKENRING_API_KEY'), maxRetries: 0, timeout: 20_000 });
const pick = (headers, names) => Object.fromEntries(names.map((n) => [n, headers.get(n)]));
const rateHeaders = ['x-ratelimit-limit-tokens', 'x-ratelimit-remaining-tokens', 'x-ratelimit-remaining-requests'];

const out = {};

// 1. A response, whole.
{
  const { data, response } = await client.responses
    .create({ model, instructions: 'Be brief.', input: 'Say hello to the proxy, please.', max_output_tokens: 50 })
    .withResponse();
  out.response = { status: response.status, text: data.output_text, usage: data.usage, headers: pick(response.headers, rateHeaders) };
}

// 2. A response, streamed.
{
  const stream = await client.responses.create({
    model,
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'Say hello to the proxy, please.' }] }],
    max_output_tokens: 50,
    stream: true,
  });
  let text = '';
  let usage = null;
  const types = [];
  for await (const event of stream) {
    types.push(event.type);
    if (event.type === 'response.output_text.delta') text += event.delta;
    if (event.type === 'response.completed') usage = event.response.usage;
  }
  out.responseStream = { text, usage, types };
}

// 3. An embedding of two texts (the SDK asks for base64 and decodes it).
{
  const { data, response } = await client.embeddings
    .create({ model: env('TOKENRING_EMBED_MODEL'), input: ['The quick brown fox', 'jumped over the lazy dog'] })
    .withResponse();
  out.embedding = {
    status: response.status,
    count: data.data.length,
    dims: Array.from(data.data[0].embedding),
    usage: data.usage,
    headers: pick(response.headers, rateHeaders),
  };
}

// 4. The model list, and one model.
{
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  const one = await client.models.retrieve(ids[0]);
  out.models = { ids, one: one.id };
}

console.log(JSON.stringify(out));
