// npm run bench:levers: reads the arguments (it takes none; the environment sets it up), then runs
// scripts/bench-levers.ts, whose top level starts PostgreSQL. --help prints that script's opening
// comment, where its settings are written once.
import { type Command, openingComment, processCommandLine } from './command.js'

const script = new URL('bench-levers.ts', import.meta.url)
const command = {
  usage: 'npm run -s bench:levers',
  about: await openingComment(script),
  options: {}
} satisfies Command
processCommandLine(command)
await import(script.href)
