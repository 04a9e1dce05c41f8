#!/usr/bin/env node
// `npx queuebox`: loads the TypeScript CLI through tsx (a devDependency of this repository).
import { register } from 'tsx/esm/api';

register();
await import('./queuebox.ts');
