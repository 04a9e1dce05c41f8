/**
 * One IAM role per function, each with only what that function uses:
 *
 * | function | beyond writing its own log group |
 * | --- | --- |
 * | outboxPoller | `sqs:SendMessage` on each SQS destination, `events:PutEvents` on each bus |
 * | outboxPoller, inboxRelay | `lambda:InvokeFunction` on its own function (and its versions and aliases) only, when its scale-out is on |
 * | inboxSqs | receive, delete and read attributes of its trigger queues |
 * | inboxHttp | `ssm:GetParameter` on the SecureString of each source secret it names |
 * | every function | read the database secret (Secrets Manager or SSM), when one is named; send X-Ray segments when `observability.tracing` is on |
 *
 * So the public HTTP receiver can publish nowhere. Names are checked against the characters AWS
 * allows (no `*` or `?`, which IAM would read as wildcards) before they enter a resource ARN.
 * Deploy-time values (the database secret, the secrets path, VPC access) are CloudFormation
 * parameters of the stack (`stack.ts`), set from `custom.queuebox`.
 */
import { deployedFunctionName, FUNCTIONS, type Deployment } from './functions.ts';

type Cfn = unknown;

const partition = { Ref: 'AWS::Partition' };
const region = { Ref: 'AWS::Region' };
const account = { Ref: 'AWS::AccountId' };

/** What the roles are built from, already resolved to ARNs and names. */
export interface RoleInputs {
  /** ARNs of the SQS destination queues. */
  destinationQueues: Cfn[];
  /** ARNs of the EventBridge destination buses. */
  destinationBuses: Cfn[];
  /** Queue names the SQS trigger receives from. */
  triggerQueues: string[];
  /** Environment variable names of the source secrets (each a SecureString under the secrets path). */
  secretNames: string[];
  /** `observability.tracing`: every role may then send X-Ray segments. */
  tracing?: boolean;
  /** Service and stage: each role may write only the log group of its deployed function. */
  deployment: Deployment;
  /** Functions (short names) whose scale-out is on: each may invoke itself, and nothing else. */
  selfInvoking?: readonly string[];
}

/** The role's logical id for function `name` (`outboxPoller` → `QueueBoxRoleOutboxPoller`). */
export function roleLogicalId(name: string): string {
  return `QueueBoxRole${name.charAt(0).toUpperCase()}${name.slice(1)}`;
}

/** Refuses a name that is not made of the characters AWS allows for it (IAM would read `*` and `?` as wildcards). */
export function checkedName(name: string, pattern: RegExp, what: string): string {
  if (!pattern.test(name)) throw new Error(`${what} ${JSON.stringify(name)} has characters AWS does not allow there (IAM would read * and ? as wildcards)`);
  return name;
}

const join = (...parts: Cfn[]): Cfn => ({ 'Fn::Join': ['', parts] });

function statement(actions: string[], resources: Cfn[]): Cfn {
  return { Effect: 'Allow', Action: actions, Resource: resources };
}

/** The role resources, one per function of `functions.ts`. */
export function roleResources(inputs: RoleInputs): Record<string, Cfn> {
  const resources: Record<string, Cfn> = {};
  const databaseSecret = {
    'Fn::If': ['QueueBoxDatabaseSecretSet', statement(['secretsmanager:GetSecretValue'], [{ Ref: 'QueueBoxDatabaseSecretArn' }]), { Ref: 'AWS::NoValue' }],
  };
  const databaseParameter = {
    'Fn::If': [
      'QueueBoxDatabaseUrlParameterSet',
      statement(['ssm:GetParameter'], [join('arn:', partition, ':ssm:', region, ':', account, ':parameter', { Ref: 'QueueBoxDatabaseUrlParameter' })]),
      { Ref: 'AWS::NoValue' },
    ],
  };
  for (const fn of FUNCTIONS) {
    const statements: Cfn[] = [
      statement(['logs:CreateLogStream', 'logs:PutLogEvents'], [join('arn:', partition, ':logs:', region, ':', account, `:log-group:/aws/lambda/${deployedFunctionName(inputs.deployment, fn.name)}:*`)]),
      databaseSecret,
      databaseParameter,
    ];
    // With per-function roles the framework adds no X-Ray rights of its own.
    if (inputs.tracing) statements.push(statement(['xray:PutTraceSegments', 'xray:PutTelemetryRecords'], ['*']));
    if (fn.name === 'outboxPoller') {
      if (inputs.destinationQueues.length > 0) statements.push(statement(['sqs:SendMessage'], inputs.destinationQueues));
      if (inputs.destinationBuses.length > 0) statements.push(statement(['events:PutEvents'], inputs.destinationBuses));
    }
    // Its own ARN from its deployed name, not a reference to the function (which would depend on
    // this role); with `:*`, its versions and aliases, which scale-out invokes when a schedule
    // targets one (`selfInvokeTarget`): IAM matches a qualified invoke against the qualified ARN only.
    if (inputs.selfInvoking?.includes(fn.name)) {
      const own = `:function:${deployedFunctionName(inputs.deployment, fn.name)}`;
      statements.push(statement(['lambda:InvokeFunction'], [join('arn:', partition, ':lambda:', region, ':', account, own), join('arn:', partition, ':lambda:', region, ':', account, `${own}:*`)]));
    }
    if (fn.name === 'inboxSqs' && inputs.triggerQueues.length > 0) {
      statements.push(
        statement(
          ['sqs:ReceiveMessage', 'sqs:DeleteMessage', 'sqs:GetQueueAttributes'],
          inputs.triggerQueues.map((queue) => join('arn:', partition, ':sqs:', region, ':', account, `:${queue}`)),
        ),
      );
    }
    if (fn.name === 'inboxHttp' && inputs.secretNames.length > 0) {
      statements.push(
        statement(
          ['ssm:GetParameter'],
          inputs.secretNames.map((name) => join('arn:', partition, ':ssm:', region, ':', account, ':parameter', { Ref: 'QueueBoxSecretsParameterPath' }, `/${name}`)),
        ),
      );
    }
    resources[roleLogicalId(fn.name)] = {
      Type: 'AWS::IAM::Role',
      Properties: {
        AssumeRolePolicyDocument: { Version: '2012-10-17', Statement: [{ Effect: 'Allow', Principal: { Service: ['lambda.amazonaws.com'] }, Action: ['sts:AssumeRole'] }] },
        ManagedPolicyArns: {
          'Fn::If': ['QueueBoxVpcAccess', [join('arn:', partition, ':iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole')], { Ref: 'AWS::NoValue' }],
        },
        Policies: [{ PolicyName: `queuebox-${fn.name}`, PolicyDocument: { Version: '2012-10-17', Statement: statements } }],
      },
    };
  }
  return resources;
}
