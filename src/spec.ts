// The contract as data, for the generator and the tests: openapi/openapi.yaml as written, and the
// same document with every $ref resolved by @redocly/openapi-core's bundler (the library behind
// `npm run lint:spec`), so nothing here follows references by hand. Never loaded by the service,
// which serves openapi/openapi.json: yaml and the bundler are dev dependencies.
import { readFile } from 'node:fs/promises'
import { parse } from 'yaml'
import { specPath } from './project-root.js'
import type { JsonObject } from './operations.js'

/** openapi/openapi.yaml parsed, references left as they are. */
export async function specAsWritten (): Promise<JsonObject> {
  return parse(await readFile(specPath, 'utf8')) as JsonObject
}

/** openapi/openapi.yaml with every $ref replaced by what it points at. */
export async function dereferencedSpec (): Promise<JsonObject> {
  // Imported when needed: loading the bundler costs a test process a third of a second.
  const { bundle, createConfig } = await import('@redocly/openapi-core')
  const { bundle: document, problems } = await bundle({ ref: specPath, config: await createConfig({}), dereference: true })
  if (problems.length > 0) throw new Error(`openapi/openapi.yaml: ${problems.map((problem) => problem.message).join('; ')}`)
  return document.parsed as JsonObject
}

/**
 * The same, as `npm test` bundled it once for the run (TEST_DEREFERENCED_SPEC, a JSON file), so its
 * many test processes each read JSON instead of loading the bundler; bundled here without it.
 */
export async function dereferencedSpecOfRun (): Promise<JsonObject> {
  const file = process.env.TEST_DEREFERENCED_SPEC
  return file ? JSON.parse(await readFile(file, 'utf8')) as JsonObject : dereferencedSpec()
}
