/**
 * Trace headers as QueueBox keeps them: valid W3C `traceparent` / `tracestate` and X-Ray trace
 * headers are kept (normalized), anything else is dropped; each form is derived from the other;
 * the SQS attributes and the EventBridge envelope carry them without ever making a row
 * undeliverable.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { OutboundMessage } from '../../lib/destinations/destination.ts';
import { eventEnvelopeJson } from '../../lib/destinations/event-envelope.ts';
import { sqsMessageAttributes } from '../../lib/destinations/sqs-message-attributes.ts';
import { runTsx } from '../helpers/run-tsx.ts';
import {
  AWS_TRACE_HEADER_MAX_LENGTH,
  awsTraceHeaderOf,
  parseStoredTraceContext,
  serializeTraceContext,
  traceContextOf,
  traceparentOf,
  TRACE_CONTEXT_MAX_LENGTH,
  TRACESTATE_MAX_LENGTH,
  validAwsTraceHeader,
  validTraceparent,
  validTracestate,
} from '../../lib/observability/trace-context.ts';

const TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
const XRAY = 'Root=1-4bf92f35-77b34da6a3ce929d0e0e4736;Parent=00f067aa0ba902b7;Sampled=1';

function message(trace: OutboundMessage['trace'], headers: Record<string, string> = {}): OutboundMessage {
  return { id: '7d3c1a52-5f0b-4d7e-9a51-0f5c8f7c2a11', topic: 'orders.created', key: null, payload: {}, payloadText: '{}', headers, attempt: 0, replayCount: 0, trace };
}

describe('trace context', () => {
  it('keeps a valid traceparent and refuses other versions, upper case, zero ids, extra text and non-strings', () => {
    assert.equal(validTraceparent(TRACEPARENT), TRACEPARENT);
    for (const bad of [
      TRACEPARENT.toUpperCase(),
      `ff${TRACEPARENT.slice(2)}`,
      `01${TRACEPARENT.slice(2)}`,
      '00-00000000000000000000000000000000-00f067aa0ba902b7-01',
      '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01',
      `${TRACEPARENT}-extra`,
      ` ${TRACEPARENT}`,
      `${TRACEPARENT},${TRACEPARENT}`,
      'x'.repeat(100_000),
      '',
      undefined,
      42,
    ]) {
      assert.equal(validTraceparent(bad), undefined, String(bad).slice(0, 80));
    }
  });

  it('keeps a valid tracestate (trimmed) up to 512 characters and 32 members; refuses bad keys, values, duplicates and longer lists', () => {
    assert.equal(validTracestate('congo=t61rcWkgMzE, rojo=00f067aa0ba902b7'), 'congo=t61rcWkgMzE,rojo=00f067aa0ba902b7');
    assert.equal(validTracestate('tenant@vendor=v1'), 'tenant@vendor=v1');
    const long = Array.from({ length: 32 }, (_, i) => `k${i}=${'v'.repeat(10)}`).join(',');
    assert.equal(validTracestate(long), long);
    for (const bad of ['', 'novalue', '=v', 'Upper=v', 'k=v,k=w', 'k=a=b', 'k=v\u0000', `k=${'v'.repeat(TRACESTATE_MAX_LENGTH)}`, `${long},k99=v`]) {
      assert.equal(validTracestate(bad), undefined, bad.slice(0, 80));
    }
  });

  it('keeps an X-Ray trace header with a Root (spaces around fields removed) and refuses a bad Root, Parent, field, or length', () => {
    assert.equal(validAwsTraceHeader(XRAY), XRAY);
    assert.equal(validAwsTraceHeader('Root=1-5759e988-bd862e3fe1be46a994272793'), 'Root=1-5759e988-bd862e3fe1be46a994272793', 'API Gateway sends a Root alone');
    assert.equal(validAwsTraceHeader(`${XRAY}; Lineage=a87bd80c:0`), `${XRAY};Lineage=a87bd80c:0`);
    for (const bad of [
      'Parent=00f067aa0ba902b7;Sampled=1',
      'Root=2-4bf92f35-77b34da6a3ce929d0e0e4736',
      'Root=1-4bf92f35-77b34da6a3ce929d0e0e4736;Parent=xyz',
      `${XRAY};Evil=<script>`,
      `${XRAY}\r\nX-Injected: 1`,
      `${XRAY};Lineage=${'a'.repeat(AWS_TRACE_HEADER_MAX_LENGTH)}`,
      'garbage',
    ]) {
      assert.equal(validAwsTraceHeader(bad), undefined, bad.slice(0, 80));
    }
  });

  it('keeps only the valid parts, a tracestate only with its traceparent, and nothing when neither id is valid', () => {
    assert.deepEqual(traceContextOf({ traceparent: TRACEPARENT, tracestate: 'a=b', awsTraceHeader: 'bad' }), { traceparent: TRACEPARENT, tracestate: 'a=b' });
    assert.deepEqual(traceContextOf({ traceparent: 'bad', tracestate: 'a=b', awsTraceHeader: XRAY }), { awsTraceHeader: XRAY });
    assert.equal(traceContextOf({ traceparent: 'bad', tracestate: 'a=b' }), null);
    assert.equal(traceContextOf({}), null);
  });

  it('stores a bounded JSON object, and reads back only what is still valid', () => {
    const trace = { traceparent: TRACEPARENT, tracestate: 'a=b', awsTraceHeader: XRAY };
    const text = serializeTraceContext(trace)!;
    assert.ok(text.length <= TRACE_CONTEXT_MAX_LENGTH);
    assert.deepEqual(parseStoredTraceContext(text), trace);
    assert.deepEqual(parseStoredTraceContext(JSON.parse(text)), trace, 'a jsonb column arrives parsed');
    assert.equal(serializeTraceContext(null), null);
    assert.equal(parseStoredTraceContext(null), null);
    assert.equal(parseStoredTraceContext('not json'), null);
    assert.deepEqual(parseStoredTraceContext({ traceparent: TRACEPARENT, awsTraceHeader: 'written by hand' }), { traceparent: TRACEPARENT });
  });

  it('derives the X-Ray header from a traceparent and back (same trace and parent ids, sampled flag)', () => {
    assert.equal(awsTraceHeaderOf({ traceparent: TRACEPARENT }), XRAY);
    assert.equal(awsTraceHeaderOf({ traceparent: TRACEPARENT.replace(/01$/, '00') }), XRAY.replace('Sampled=1', 'Sampled=0'));
    assert.equal(traceparentOf({ awsTraceHeader: XRAY }), TRACEPARENT);
    assert.equal(traceparentOf({ awsTraceHeader: 'Root=1-5759e988-bd862e3fe1be46a994272793' }), undefined, 'no Parent: no traceparent');
    assert.equal(awsTraceHeaderOf({ traceparent: TRACEPARENT, awsTraceHeader: 'Root=1-5759e988-bd862e3fe1be46a994272793' }), 'Root=1-5759e988-bd862e3fe1be46a994272793', 'a stored header is used as it is');
    assert.equal(awsTraceHeaderOf(null), undefined);
  });

  it('adds traceparent and tracestate to the SQS attributes while there is room, never past 10, and keeps a row header of the same name', () => {
    const withTrace = sqsMessageAttributes(message({ traceparent: TRACEPARENT, tracestate: 'a=b' }));
    assert.ok(withTrace.ok);
    assert.equal(withTrace.attributes.traceparent?.StringValue, TRACEPARENT);
    assert.equal(withTrace.attributes.tracestate?.StringValue, 'a=b');
    const without = sqsMessageAttributes(message(null));
    assert.ok(without.ok);
    assert.equal(withTrace.bytes - without.bytes, 'traceparent'.length + 6 + 55 + 'tracestate'.length + 6 + 3);

    // X-Message-Id, X-Topic, X-Attempt + 6 row headers: room for one more, the traceparent.
    const six = Object.fromEntries(Array.from({ length: 6 }, (_, i) => [`h${i}`, 'v']));
    const full = sqsMessageAttributes(message({ traceparent: TRACEPARENT, tracestate: 'a=b' }, six));
    assert.ok(full.ok);
    assert.equal(Object.keys(full.attributes).length, 10);
    assert.equal(full.attributes.traceparent?.StringValue, TRACEPARENT);
    assert.equal(full.attributes.tracestate, undefined);
    const seven = { ...six, h6: 'v' };
    const none = sqsMessageAttributes(message({ traceparent: TRACEPARENT }, seven));
    assert.ok(none.ok, 'the row is still deliverable');
    assert.equal(Object.keys(none.attributes).length, 10);
    assert.equal(none.attributes.traceparent, undefined);

    const own = sqsMessageAttributes(message({ traceparent: TRACEPARENT, tracestate: 'a=b' }, { traceparent: 'mine' }));
    assert.ok(own.ok);
    assert.equal(own.attributes.traceparent?.StringValue, 'mine');
    assert.equal(own.attributes.tracestate, undefined);
  });

  it('puts traceparent and tracestate in the EventBridge envelope metadata only when the row has a trace context', () => {
    const traced = JSON.parse(eventEnvelopeJson(message({ awsTraceHeader: XRAY }))) as { metadata: Record<string, unknown> };
    assert.equal(traced.metadata.traceparent, TRACEPARENT);
    assert.equal('tracestate' in traced.metadata, false);
    const plain = JSON.parse(eventEnvelopeJson(message(null))) as { metadata: Record<string, unknown> };
    assert.deepEqual(Object.keys(plain.metadata), ['version', 'messageId', 'topic', 'key', 'attempt', 'correlationId', 'headers']);
  });

  it('without @opentelemetry/api installed, enqueue\'s capture looks for it once, on the first call, and falls back to _X_AMZN_TRACE_ID', async () => {
    // A child where resolving the package fails as it does when it is not installed; the hook
    // counts the look-ups.
    const script = `
      import { registerHooks } from 'node:module';
      let lookups = 0;
      registerHooks({
        resolve(specifier, context, next) {
          if (specifier !== '@opentelemetry/api') return next(specifier, context);
          lookups++;
          throw Object.assign(new Error("Cannot find module '@opentelemetry/api'"), { code: 'MODULE_NOT_FOUND' });
        },
      });
      const { captureTraceContext } = await import(${JSON.stringify(new URL('../../lib/observability/trace-context.ts', import.meta.url).href)});
      const afterImport = lookups;
      process.env._X_AMZN_TRACE_ID = ${JSON.stringify(XRAY)};
      const first = captureTraceContext();
      delete process.env._X_AMZN_TRACE_ID;
      const second = captureTraceContext();
      console.log(JSON.stringify({ afterImport, lookups, first, second }));
    `;
    const run = await runTsx(['--input-type=module', '--eval', script], { ...process.env, _X_AMZN_TRACE_ID: '' });
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(JSON.parse(run.stdout.trim().split('\n').at(-1)!), { afterImport: 0, lookups: 1, first: { awsTraceHeader: XRAY }, second: null });
  });
});
