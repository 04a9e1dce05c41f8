// `custom.queuebox.config` of this repository's serverless.yml: queuebox.yml in the directory osls
// runs in when it exists, else queuebox.example.yml (so a fresh clone packages).
const { existsSync } = require('node:fs');

module.exports = () => {
  if (existsSync('queuebox.yml')) return 'queuebox.yml';
  process.stderr.write('no queuebox.yml: building with queuebox.example.yml (copy it to queuebox.yml and edit it)\n');
  return 'queuebox.example.yml';
};
