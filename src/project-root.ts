import { existsSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

// Code runs from src/ under tsx and from dist/src/ once compiled: both find the folder that holds
// package.json, where openapi/ and db/migrations/ live.
function findProjectRoot (from: string): string {
  let dir = from
  while (!existsSync(join(dir, 'package.json'))) {
    const parent = dirname(dir)
    if (parent === dir) throw new Error(`no package.json above ${from}`)
    dir = parent
  }
  return dir
}

export const projectRoot = findProjectRoot(dirname(fileURLToPath(import.meta.url)))
export const specPath = join(projectRoot, 'openapi', 'openapi.yaml')
/** The same document as JSON, written by `npm run generate`: what the service serves. */
export const specJsonPath = join(projectRoot, 'openapi', 'openapi.json')
export const migrationsDir = join(projectRoot, 'db', 'migrations')
/** Where `npm test` transpiles the project to run its tests as JavaScript (scripts/test.ts). */
export const testBuildDir = join(projectRoot, '.test-build')
