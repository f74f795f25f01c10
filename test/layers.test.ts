// Dependencies point one way, down this list (docs/architecture.md):
//   src/app.ts, src/server.ts, src/serve.ts   the application and the process
//   src/routes/                 the operations
//   plugins/                    cross-cutting concerns of the Fastify instance
//   src/ leaf modules           problems, config, validation, … (no Fastify instance)
//   db/                         the query module, migrations, the pool: nothing of the app
// scripts/ and test/ sit on top and may import any of them, except a route module: what a script
// needs of one (sort keys, say) belongs further down. And a test imports nothing of scripts/: what
// it needs of a script belongs further down too (db/, src/), and a command is tested as a process.
import { readdir, readFile } from 'node:fs/promises'
import { dirname, join, normalize, relative } from 'node:path'
import t from 'tap'
import { projectRoot } from '../src/project-root.js'

const layers: Array<[string, (file: string) => boolean]> = [
  ['db', (file) => file.startsWith('db/')],
  ['src leaf', (file) => file.startsWith('src/') && !file.startsWith('src/routes/') && !['src/app.ts', 'src/server.ts', 'src/serve.ts'].includes(file)],
  ['plugins', (file) => file.startsWith('plugins/')],
  ['routes', (file) => file.startsWith('src/routes/')],
  ['app', (file) => ['src/app.ts', 'src/server.ts', 'src/serve.ts'].includes(file)],
  ['scripts and tests', (file) => file.startsWith('scripts/') || file.startsWith('test/')]
]
const layerOf = (file: string) => layers.findIndex(([, holds]) => holds(file))
// The bench's ablation ladder builds the application a layer at a time, as src/app.ts builds it
// whole: it registers the list's route module (from the build) and types itself after it.
const stacksTheApp = ['scripts/bench/ladder-server.ts']

async function sourcesUnder (dir: string): Promise<string[]> {
  const entries = await readdir(join(projectRoot, dir), { withFileTypes: true, recursive: true })
  return entries.filter((entry) => entry.isFile() && entry.name.endsWith('.ts'))
    .map((entry) => relative(projectRoot, join(entry.parentPath, entry.name)))
}

// Relative imports only: packages are not layers of ours. `import type` counts too: a type that
// needs an upper layer is a sign the code is in the wrong place.
async function importsOf (file: string): Promise<string[]> {
  const text = await readFile(join(projectRoot, file), 'utf8')
  return [...text.matchAll(/^(?:import|export)\b[^'"]*?from '(\.{1,2}\/[^']+)'/gm)]
    .map(([, specifier]) => normalize(join(dirname(file), specifier)).replace(/\.js$/, '.ts'))
}

const files = (await Promise.all(['src', 'plugins', 'db', 'scripts', 'test'].map(sourcesUnder))).flat()

t.test('every source file belongs to a layer', async (t) => {
  t.ok(files.length > 50, `${files.length} files`)
  for (const file of files) t.not(layerOf(file), -1, file)
})

t.test('no module imports from a layer above its own', async (t) => {
  let edges = 0
  for (const file of files) {
    for (const imported of await importsOf(file)) {
      edges++
      const [from, to] = [layerOf(file), layerOf(imported)]
      if (to > from) t.fail(`${file} (${layers[from][0]}) imports ${imported} (${layers[to][0]})`)
      if (imported.startsWith('src/routes/') && !file.startsWith('src/') && !stacksTheApp.includes(file)) t.fail(`${file} imports the route module ${imported}`)
      if (file.startsWith('test/') && imported.startsWith('scripts/')) t.fail(`${file} imports ${imported}: a test imports nothing of scripts/`)
    }
  }
  t.ok(edges > 100, `${edges} imports checked`)
})

// A setting is bound where it is used (docs/architecture.md): plugins/db.ts binds the query module
// to the pool and the statement settings, and routes call it with what a request gives. A module
// reads a setting when its code (not a comment, not a sentence naming it) takes it from an object:
// `config.X`, `config['X']`, or `const { X } = config`.
const withoutComments = (text: string) => text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:])\/\/.*$/gm, '$1')
function databaseSettingsRead (text: string): string[] {
  const code = withoutComments(text)
  const accessed = [...code.matchAll(/(?:\.|\[\s*['"`])(DATABASE_[A-Z_]+)\b/g)].map(([, name]) => name)
  const destructured = [...code.matchAll(/\{([^{}]*)\}\s*=[^=>]/g)].flatMap(([, names]) => names.match(/\bDATABASE_[A-Z_]+/g) ?? [])
  return [...new Set([...accessed, ...destructured])].sort()
}

t.test('a module reads a DATABASE_ setting when its code takes it from the configuration, not when it names it', async (t) => {
  t.same(databaseSettingsRead('const on = fastify.config.DATABASE_PREPARED_STATEMENTS'), ['DATABASE_PREPARED_STATEMENTS'])
  t.same(databaseSettingsRead("const ms = config['DATABASE_STATEMENT_TIMEOUT_MS']"), ['DATABASE_STATEMENT_TIMEOUT_MS'])
  t.same(databaseSettingsRead('const { DATABASE_URL, DATABASE_POOL_MAX: max } = config'), ['DATABASE_POOL_MAX', 'DATABASE_URL'])
  t.same(databaseSettingsRead("// config.DATABASE_URL\n/* config.DATABASE_POOL_MAX */\nconst hint = 'set DATABASE_POOLER=transaction'"), [])
})

t.test('no route module reads a DATABASE_ setting; only plugins/db.ts reads the statement settings', async (t) => {
  const routes = files.filter((file) => file.startsWith('src/routes/'))
  t.ok(routes.length > 10, `${routes.length} route modules`)
  for (const file of routes) t.same(databaseSettingsRead(await readFile(join(projectRoot, file), 'utf8')), [], file)
  const statementSettings = ['DATABASE_PREPARED_STATEMENTS', 'DATABASE_STATEMENT_TIMEOUT_MS']
  const readers: string[] = []
  for (const file of files.filter((file) => layerOf(file) < layerOf('src/app.ts'))) {
    const read = databaseSettingsRead(await readFile(join(projectRoot, file), 'utf8'))
    if (read.some((setting) => statementSettings.includes(setting))) readers.push(file)
  }
  // The schema checks them (src/config.ts); the db plugin binds them, for routes and plugins alike.
  t.same(readers.sort(), ['plugins/db.ts', 'src/config.ts'])
})
