// Dependencies point one way, down this list (docs/architecture.md):
//   src/app.ts, src/server.ts, src/serve.ts   the application and the process
//   src/routes/                 the operations
//   plugins/                    cross-cutting concerns of the Fastify instance
//   src/ leaf modules           problems, config, validation, … (no Fastify instance)
//   db/                         the query module, migrations, the pool: nothing of the app
// scripts/ and test/ sit on top and may import any of them, except a route module: what a script
// needs of one (sort keys, say) belongs further down.
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
    }
  }
  t.ok(edges > 100, `${edges} imports checked`)
})
