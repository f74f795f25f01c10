// Writes from openapi/openapi.yaml: src/generated/ (TypeScript types by openapi-typescript and, per
// operation, what Fastify needs: src/operations.ts) and openapi/openapi.json, the
// document the service serves (so it needs no YAML parser at run time). `--check` writes nothing
// and exits 1 when the committed files differ from the spec.
import { readFile, writeFile } from 'node:fs/promises'
import { join, relative } from 'node:path'
import { buildOperations } from '../src/operations.js'
import { projectRoot, specJsonPath } from '../src/project-root.js'
import { dereferencedSpec, specAsWritten } from '../src/spec.js'
import { type Command, isEntryPoint, readCommandLine } from '../src/command-line.js'

const command = {
  usage: 'npm run -s generate [-- --check]',
  about: 'Writes src/generated/ and openapi/openapi.json from openapi/openapi.yaml.',
  options: { check: { type: 'boolean', about: 'write nothing; exit 1 when the generated files differ from the spec' } }
} satisfies Command

const generatedDir = join(projectRoot, 'src', 'generated')
const banner = (what: string) =>
  `// DO NOT EDIT. ${what}, generated from openapi/openapi.yaml by \`npm run generate\`.\n`

async function render (): Promise<Map<string, string>> {
  // Imported when needed: openapi-typescript loads the TypeScript compiler (about 1 s of CPU), which
  // --help and a refused option do not need.
  const { default: openapiTS, astToString } = await import('openapi-typescript')
  const spec = await specAsWritten()
  const types = astToString(await openapiTS(spec as never, { alphabetize: true }))
  const operations = buildOperations(await dereferencedSpec())
  const operationsModule = banner('Per-operation JSON schemas and route config (scopes, or public)') +
    `export const operations = ${JSON.stringify(operations, null, 2)} as const\n\n` +
    'export type OperationId = keyof typeof operations\n'
  return new Map([
    [join(generatedDir, 'openapi.ts'), banner('TypeScript types of the API') + types],
    [join(generatedDir, 'operations.ts'), operationsModule],
    [specJsonPath, `${JSON.stringify(spec, null, 2)}\n`]
  ])
}

/** Returns the exit code: 0 written (or up to date, or --help), 1 out of date (--check), 2 bad arguments. */
async function main (args: string[]): Promise<number> {
  const commandLine = readCommandLine(command, args)
  if (typeof commandLine === 'number') return commandLine
  const { values: { check = false } } = commandLine
  const stale: string[] = []
  for (const [file, content] of await render()) {
    const current = await readFile(file, 'utf8').catch(() => undefined)
    if (current === content) continue
    if (check) stale.push(relative(projectRoot, file))
    else await writeFile(file, content)
  }
  if (stale.length > 0) {
    console.error(`Generated files are out of date with openapi/openapi.yaml: ${stale.join(', ')}.\nRun \`npm run generate\` and commit the result.`)
    return 1
  }
  console.log(check ? 'Generated files match openapi/openapi.yaml.' : 'src/generated/ is up to date.')
  return 0
}

if (isEntryPoint(import.meta.url)) process.exitCode = await main(process.argv.slice(2))
