// The official Anthropic SDK (npm "@anthropic-ai/sdk") as a client of
// tokenringd's LLM proxy: a token count (passed through, uncharged) and a
// message. Run by test/proxy_test.go (TestSDKEndpoints) with:
//
//   TOKENRING_URL       the proxy's URL, without /v1: http://127.0.0.1:8080
//   TOKENRING_API_KEY   a key of a tenant with room for one message
//   TOKENRING_MODEL     the model to name
//
// It prints one JSON object with what it saw; the Go test asserts on it. Any
// unexpected failure exits non-zero with the error on stderr.
import Anthropic from '@anthropic-ai/sdk';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};

const model = env('TOKENRING_MODEL');
const client = new Anthropic({ baseURL: env('TOKENRING_URL'), apiKey: env('TOKENRING_API_KEY'), maxRetries: 0, timeout: 20_000 });
const messages = [{ role: 'user', content: 'Say hello to the proxy, please.' }];
const pick = (headers, names) => Object.fromEntries(names.map((n) => [n, headers.get(n)]));

const out = {};
{
  const { data, response } = await client.messages.countTokens({ model, messages }).withResponse();
  out.countTokens = { status: response.status, inputTokens: data.input_tokens };
}
{
  const { data, response } = await client.messages.create({ model, messages, max_tokens: 50 }).withResponse();
  out.message = {
    status: response.status,
    text: data.content[0].text,
    usage: data.usage,
    headers: pick(response.headers, ['anthropic-ratelimit-requests-limit', 'anthropic-ratelimit-requests-remaining', 'anthropic-ratelimit-tokens-remaining']),
  };
}
console.log(JSON.stringify(out));
