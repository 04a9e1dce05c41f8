/**
 * The deployed Lambda functions: name in `serverless.yml`, entry file, whether a schedule drives
 * it. The build bundles exactly these entries; the dashboard and alarms cover exactly these
 * functions; a test checks `serverless.yml` declares exactly these names.
 */
export interface FunctionDef {
  /** Function key in `serverless.yml` (also `dist/<name>/index.js`). */
  name: string;
  /** TypeScript entry exporting `handler`. */
  entry: string;
  /** True when an EventBridge schedule invokes it. */
  scheduled: boolean;
}

export const FUNCTIONS: readonly FunctionDef[] = [
  { name: 'outboxPoller', entry: 'functions/outbox-poller.ts', scheduled: true },
  { name: 'inboxHttp', entry: 'functions/inbox-http.ts', scheduled: false },
  { name: 'inboxSqs', entry: 'functions/inbox-sqs.ts', scheduled: false },
  { name: 'inboxRelay', entry: 'functions/inbox-relay.ts', scheduled: true },
  { name: 'reclaim', entry: 'functions/reclaim.ts', scheduled: true },
  { name: 'retention', entry: 'functions/retention.ts', scheduled: true },
  { name: 'replay', entry: 'functions/replay.ts', scheduled: false },
  { name: 'migrate', entry: 'functions/migrate.ts', scheduled: false },
];

/** The CloudFormation logical id the Serverless Framework gives a function (`outboxPoller` → `OutboxPollerLambdaFunction`). */
export function functionLogicalId(name: string): string {
  return `${name.charAt(0).toUpperCase()}${name.slice(1).replaceAll('-', 'Dash').replaceAll('_', 'Underscore')}LambdaFunction`;
}
