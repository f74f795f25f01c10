// What the npm scripts' commands say, and where: stdout and stderr, through an Output. Every
// command reads its arguments the same way (readCommandLine): --help/-h prints its help and exits 0
// before any work, and an argument it does not know is one line on stderr and exit 2. A command's
// file does its work in a function it calls only when it is the file the process runs
// (isEntryPoint), so importing it starts nothing.
import { realpathSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs, type ParseArgsConfig } from 'node:util'
import { projectRoot, testBuildDir } from './project-root.js'

export interface Output {
  out: (line: string) => void
  err: (line: string) => void
}

/** The database a command works on, as the service would reach it. */
export interface CommandDatabase {
  /** DATABASE_URL, or the local embedded database's. */
  url: string
  /** Where migrations run: MIGRATIONS_DATABASE_URL (a direct connection, past a transaction pooler), else url. */
  migrationsUrl: string
  /**
   * How long a connection may take, and a statement wait for a lock another session holds
   * (MIGRATIONS_CONNECTION_WAIT_MS): a server that never answers, or a lock never released, fails
   * the command rather than hangs it.
   */
  connectionWaitMs: number
  /** `url` is a transaction pooler (DATABASE_POOLER=transaction): nothing may be sent with its connections. */
  pooled: boolean
}

/** What a database command says, and the database it works on. */
export interface DatabaseIo extends Output {
  /** Runs the work against the database (DATABASE_URL, or the local embedded one). */
  withDatabase: (work: (database: CommandDatabase) => Promise<void>) => Promise<void>
}

export const processOutput: Output = { out: (line) => console.log(line), err: (line) => console.error(line) }

/** An option as parseArgs takes it, with its line in the help. */
export type CommandOption = NonNullable<ParseArgsConfig['options']>[string] & {
  /** What the option does. A default is added to the help by itself. */
  about: string
  /** How the help names a string option's value (SECONDS). */
  value?: string
}

/** A command as its help describes it. */
export interface Command<Options extends Record<string, CommandOption> = Record<string, CommandOption>> {
  /** How it is run, arguments included: the first line of the help and of every usage error. */
  usage: string
  /** What it does: the lines under the usage line. */
  about: string
  /** Its options, -h/--help aside (every command has that one). */
  options: Options
  /** Whether it takes arguments that are not options (a file, a count, area names). */
  allowPositionals?: boolean
}

const helpOption = { type: 'boolean', short: 'h', about: 'print this help and exit' } as const

/** The help: the usage line, what the command does, then its options. */
export function helpOf (command: Command): string {
  const every: Record<string, CommandOption> = { ...command.options, help: helpOption }
  const options = Object.entries(every).map(([name, option]) => ({
    flags: `${option.short ? `-${option.short}, ` : ''}--${name}${option.type === 'string' ? ` ${option.value ?? 'VALUE'}` : ''}`,
    about: option.default === undefined || option.default === false ? option.about : `${option.about} (default: ${String(option.default)})`
  }))
  const width = Math.max(...options.map(({ flags }) => flags.length))
  return [
    `usage: ${command.usage}`,
    command.about,
    '',
    'Options:',
    ...options.map(({ flags, about }) => `  ${flags.padEnd(width)}  ${about}`)
  ].join('\n')
}

/** Says what is wrong with the arguments, on one line with the usage; returns the exit code 2. */
export function usageError (command: Command, problem: string, io: Output = processOutput): 2 {
  io.err(`${problem} (usage: ${command.usage})`)
  return 2
}

type CommandLine<Options extends Record<string, CommandOption>> =
  ReturnType<typeof parseArgs<{ args: string[], options: Options & { help: typeof helpOption }, strict: true, allowPositionals: true }>>

/**
 * The command's arguments, or the exit code when nothing more is to be done: 0 after printing the
 * help (-h, --help), 2 after one line on what parseArgs refused (an unknown option, a missing
 * value, an argument where none is taken).
 */
export function readCommandLine<Options extends Record<string, CommandOption>> (
  command: Command<Options>, args: string[], io: Output = processOutput
): CommandLine<Options> | 0 | 2 {
  let commandLine
  try {
    commandLine = parseArgs({
      args,
      options: { ...command.options, help: helpOption },
      strict: true,
      allowPositionals: command.allowPositionals ?? false
    })
  } catch (error) {
    // parseArgs's first sentence, without the advice it adds to an unknown option when the command
    // takes positionals (how to pass a file named like an option): the usage follows instead.
    const problem = (error as Error).message.split('\n')[0].replace(/\. To specify a positional argument .*$/, '')
    return usageError(command, problem, io)
  }
  if ((commandLine.values as { help?: boolean }).help) {
    io.out(helpOf(command))
    return 0
  }
  return commandLine as CommandLine<Options>
}

/**
 * The comment a source file opens with, without its slashes: where a script documents itself. Run
 * from npm test's build (.test-build/, whose JavaScript keeps no comments), read from its source.
 */
export async function openingComment (file: URL): Promise<string> {
  const path = fileURLToPath(file)
  const fromBuild = relative(testBuildDir, path)
  const source = fromBuild.startsWith('..') ? path : join(projectRoot, fromBuild.replace(/\.js$/, '.ts'))
  const lines = (await readFile(source, 'utf8')).split('\n')
  const end = lines.findIndex((line) => !line.startsWith('//'))
  return lines.slice(0, end).map((line) => line.replace(/^\/\/ ?/, '')).join('\n')
}

/**
 * Whether the module at `moduleUrl` (its import.meta.url) is the file this process runs (`tsx
 * scripts/token.ts`, `node dist/scripts/token.js`) rather than a module another script imports: a
 * command calls its main only then, so importing it starts nothing.
 */
export function isEntryPoint (moduleUrl: string): boolean {
  const entry = process.argv[1]
  if (!entry) return false
  const real = (path: string) => { try { return realpathSync(path) } catch { return path } }
  return real(resolve(entry)) === real(fileURLToPath(moduleUrl))
}
