// How a test runs one of the project's own files in a node process of its own, the way the test
// itself runs: compiled when the tests are (npm test's .test-build/, the mutation run's sandbox
// dist/), the build's file beside them with node alone; else the TypeScript source under tsx.
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { projectRoot } from '../../src/project-root.js'

const here = fileURLToPath(import.meta.url)
/** The build this file is part of (it is test/support/node-args.js there), if it runs compiled. */
const buildRoot = here.endsWith('.js') ? resolve(dirname(here), '..', '..') : undefined

/** What node needs before a file of the project to load it: tsx for the source, nothing for a build. */
export const loaderArgs: string[] = buildRoot ? [] : ['--import', 'tsx']

/** The file node runs for the project's `source` (a path from the project's root, `src/server.ts`). */
export function runnableOf (source: string): string {
  return buildRoot ? join(buildRoot, source.replace(/\.ts$/, '.js')) : join(projectRoot, source)
}

/** node's arguments to run the project's `source` as a process: `[...nodeArgsOf('src/server.ts'), ...args]`. */
export const nodeArgsOf = (source: string): string[] => [...loaderArgs, runnableOf(source)]

/** The folder the project's files run from: the build's, or the project's own under tsx. */
export const runRoot: string = buildRoot ?? projectRoot
