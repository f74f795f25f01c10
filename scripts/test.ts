// npm test: runs tap against a real PostgreSQL: TEST_DATABASE_URL when given, else a throwaway
// embedded cluster made for this run. The tests run compiled: every TypeScript file of the project
// is transpiled by esbuild into .test-build/ (half a second, no type check: `npm run typecheck`
// does that), so each test file's process, and each server or command a test starts, loads
// JavaScript instead of compiling through tsx (about 0.9 s of CPU a process, on two cores shared by
// six test files at a time). Each test file runs without tap's process recording, which the
// suite does not use (test/support/without-process-info.ts, about 1 s of CPU a file). Arguments
// pass through to tap (npm test -- test/x.test.ts: a source path is run as its build); --help/-h
// is answered here, and tap's own reading of its options refuses what it does not know, both
// before anything is built or a database is made.
import { existsSync } from 'node:fs'
import { mkdir, readdir, rm, symlink } from 'node:fs/promises'
import { join, relative, resolve, sep } from 'node:path'
import { pathToFileURL } from 'node:url'
import { TapConfig } from '@tapjs/config'
import { build } from 'esbuild'
import { type Command, helpOf, isEntryPoint, usageError } from '../src/command-line.js'
import { projectRoot, testBuildDir } from '../src/project-root.js'
import { tapBuiltFor } from './tap-build.js'
import { runWithTestDatabase } from './test-database.js'

const command = {
  usage: 'npm test [-- [TAP OPTIONS] [TEST FILES]]',
  about: 'Runs tap on every test/**/*.test.ts, or on the files or folders given, against TEST_DATABASE_URL or a\n' +
    'throwaway embedded PostgreSQL made for the run. Every other argument goes to tap: its options are in\n' +
    '`npx tap --help`.',
  options: {}
} satisfies Command

const sourceDirs = ['src', 'plugins', 'db', 'scripts', 'test']

/** Transpiles every .ts file under the source folders into testBuildDir, the same paths with .js. */
async function buildTests (): Promise<void> {
  await rm(testBuildDir, { recursive: true, force: true })
  const entryPoints = (await Promise.all(sourceDirs.map(async (dir) =>
    (await readdir(join(projectRoot, dir), { recursive: true }))
      .filter((file) => file.endsWith('.ts') && !file.endsWith('.d.ts'))
      .map((file) => join(dir, file))))).flat()
  await build({
    entryPoints,
    absWorkingDir: projectRoot,
    outbase: '.',
    outdir: testBuildDir,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    sourcemap: 'inline',
    logLevel: 'warning'
  })
}

/** A test file or folder of the source as its build; any other argument as it is. */
function asBuilt (arg: string): string {
  if (arg.startsWith('-') || !existsSync(arg)) return arg
  const path = relative(projectRoot, resolve(arg))
  if (!sourceDirs.some((dir) => path === dir || path.startsWith(`${dir}/`))) return arg
  return join(testBuildDir, path.replace(/\.ts$/, '.js'))
}

/**
 * Every test file of the build, for a run given none, the whole-process suites (test/system) named
 * through .test-build/first/test/system. tap starts files in the order of their names; those suites
 * mostly wait on the processes they start, and begun last they left the run's final seconds to a
 * few of them on an idle core. `first` sorts before `test`, so they begin at once, beside the files
 * that keep the cores busy.
 */
async function everyTestFile (): Promise<string[]> {
  const dir = join(testBuildDir, 'test')
  const first = join(testBuildDir, 'first', 'test')
  await mkdir(first, { recursive: true })
  await symlink(join(dir, 'system'), join(first, 'system'), 'dir')
  return (await readdir(dir, { recursive: true }))
    .filter((file) => file.endsWith('.test.js'))
    .map((file) => join(file.startsWith(`system${sep}`) ? first : dir, file))
    .sort()
}

/** NODE_OPTIONS that preload test/support/without-process-info (its build) before tap's own import. */
function withoutProcessInfo (): string {
  const preload = pathToFileURL(join(testBuildDir, 'test', 'support', 'without-process-info.js')).href
  return [`--import=${preload}`, process.env.NODE_OPTIONS].filter(Boolean).join(' ')
}

/** Answers --help, or builds the tests and runs tap with the arguments, and exits with its code. */
async function main (args: string[]): Promise<number> {
  // After `--` every argument is a file name, even one that looks like -h.
  const options = args.includes('--') ? args.slice(0, args.indexOf('--')) : args
  if (options.includes('--help') || options.includes('-h')) {
    console.log(helpOf(command))
    return 0
  }
  // tap reads process.argv the same way when it runs; a refusal there would come after the
  // database is made, as a stack trace.
  let tapConfig
  try {
    tapConfig = await TapConfig.load()
  } catch (error) {
    return usageError(command, (error as Error).message.split('. To specify a positional argument')[0])
  }
  if (!await tapBuiltFor(tapConfig)) return 1
  await buildTests()
  const tapArgs = args.map(asBuilt)
  if (tapConfig.positionals.length === 0) tapArgs.push(...await everyTestFile())
  return await runWithTestDatabase('tap', tapArgs, { NODE_OPTIONS: withoutProcessInfo() })
}

if (isEntryPoint(import.meta.url)) process.exitCode = await main(process.argv.slice(2))
