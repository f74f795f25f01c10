// npm run bench: reads the arguments (it takes none; the environment sets the bench up), then runs
// scripts/bench.ts, whose top level starts PostgreSQL. The bench documents its settings in its
// opening comment, which --help prints, so they are written once.
import { type Command, openingComment, processCommandLine } from './command.js'

const script = new URL('bench.ts', import.meta.url)
const command = {
  usage: 'npm run -s bench',
  about: await openingComment(script),
  options: {}
} satisfies Command
processCommandLine(command)
await import(script.href)
