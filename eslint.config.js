// Lint: typescript-eslint's recommended rules on every TypeScript file of the repository.
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['node_modules/', '.serverless/', 'dist/', 'test/data-layers/prisma/generated/'] },
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      'no-empty': ['error', { allowEmptyCatch: true }],
    },
  },
);
