/**
 * The deployed Lambda functions: short name, entry module, whether a schedule drives it. The build
 * bundles exactly these entries; the roles, dashboard and alarms cover exactly these functions.
 *
 * In a Serverless service each is the function `queuebox<Name>` (`outboxPoller` →
 * `queueboxOutboxPoller`), deployed as `<service>-<stage>-queueboxOutboxPoller`, with the
 * logical id `QueueboxOutboxPollerLambdaFunction`: the prefix keeps them apart from the service's
 * own functions.
 */
export interface FunctionDef {
  /** Short name: the bundle folder (`<buildDir>/<name>/index.js`), dashboard labels, option keys. */
  name: string;
  /** Entry module below `functions/`, without extension (`.ts` in the repository, `.js` installed). */
  entry: string;
  /** True when an EventBridge schedule invokes it. */
  scheduled: boolean;
}

/** Every QueueBox function. */
export const FUNCTIONS: readonly FunctionDef[] = [
  { name: 'outboxPoller', entry: 'outbox-poller', scheduled: true },
  { name: 'inboxHttp', entry: 'inbox-http', scheduled: false },
  { name: 'inboxSqs', entry: 'inbox-sqs', scheduled: false },
  { name: 'inboxRelay', entry: 'inbox-relay', scheduled: true },
  { name: 'reclaim', entry: 'reclaim', scheduled: true },
  { name: 'retention', entry: 'retention', scheduled: true },
  { name: 'replay', entry: 'replay', scheduled: false },
  { name: 'migrate', entry: 'migrate', scheduled: false },
];

const capitalized = (name: string) => `${name.charAt(0).toUpperCase()}${name.slice(1)}`;

/** The function's key in the service's `functions` (`outboxPoller` → `queueboxOutboxPoller`). */
export function functionKey(name: string): string {
  return `queuebox${capitalized(name)}`;
}

/** The CloudFormation logical id the Serverless Framework gives it (`outboxPoller` → `QueueboxOutboxPollerLambdaFunction`). */
export function functionLogicalId(name: string): string {
  return `${capitalized(functionKey(name))}LambdaFunction`;
}

/** Where the functions are deployed: the service name and stage, which make up their names. */
export interface Deployment {
  service: string;
  stage: string;
}

/** The deployed function name (`<service>-<stage>-queueboxOutboxPoller`), also its log group's suffix. */
export function deployedFunctionName(deployment: Deployment, name: string): string {
  return `${deployment.service}-${deployment.stage}-${functionKey(name)}`;
}

/** The longest function name Lambda accepts. */
export const MAX_FUNCTION_NAME_LENGTH = 64;

/**
 * Why the deployed names cannot be used, or `undefined`: Lambda refuses a function name over 64
 * characters, and the longest of QueueBox's (`<service>-<stage>-queueboxOutboxPoller`) decides.
 */
export function deployedNamesProblem(deployment: Deployment): string | undefined {
  const longest = FUNCTIONS.map((f) => deployedFunctionName(deployment, f.name)).reduce((a, b) => (b.length > a.length ? b : a));
  if (longest.length <= MAX_FUNCTION_NAME_LENGTH) return undefined;
  const room = MAX_FUNCTION_NAME_LENGTH - (longest.length - deployment.service.length - deployment.stage.length);
  return `the function name ${longest} is ${longest.length} characters; Lambda accepts at most ${MAX_FUNCTION_NAME_LENGTH}: the service name and stage together may have at most ${room} characters (now ${deployment.service.length + deployment.stage.length}: service ${deployment.service}, stage ${deployment.stage})`;
}
