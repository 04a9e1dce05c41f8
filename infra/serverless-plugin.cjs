// This repository's serverless.yml loads the QueueBox plugin from its TypeScript source through
// tsx (a dev dependency), so `osls package` works in a clone without compiling first. Services
// that install the package load the compiled plugin instead: `plugins: [queuebox/serverless]`.
const { require: tsxRequire } = require('tsx/cjs/api');

module.exports = tsxRequire('../lib/serverless/index.ts', __filename).default;
