// npm test: runs tap against a real PostgreSQL: TEST_DATABASE_URL when given, else a throwaway
// embedded cluster made for this run. Arguments pass through to tap (npm test -- test/x.test.ts);
// --help/-h is answered here, and tap's own reading of its options refuses what it does not know,
// both before any database is made.
import { TapConfig } from '@tapjs/config'
import { type Command, helpOf, isEntryPoint, usageError } from '../src/command-line.js'
import { runWithTestDatabase } from './test-database.js'

const command = {
  usage: 'npm test [-- [TAP OPTIONS] [TEST FILES]]',
  about: 'Runs tap on every test/**/*.test.ts, or on the files given, against TEST_DATABASE_URL or a throwaway\n' +
    'embedded PostgreSQL made for the run. Every argument goes to tap: its options are in `npx tap --help`.',
  options: {}
} satisfies Command

/** Answers --help, or runs tap with the arguments and exits with its code. */
async function main (args: string[]): Promise<number> {
  // After `--` every argument is a file name, even one that looks like -h.
  const options = args.includes('--') ? args.slice(0, args.indexOf('--')) : args
  if (options.includes('--help') || options.includes('-h')) {
    console.log(helpOf(command))
    return 0
  }
  // tap reads process.argv the same way when it runs; a refusal there would come after the
  // database is made, as a stack trace.
  try {
    await TapConfig.load()
  } catch (error) {
    return usageError(command, (error as Error).message.split('. To specify a positional argument')[0])
  }
  return await runWithTestDatabase('tap', args)
}

if (isEntryPoint(import.meta.url)) process.exitCode = await main(process.argv.slice(2))
