// npm run bench: reads the arguments (it takes none; the environment sets the bench up), then runs
// scripts/bench.ts, whose top level starts PostgreSQL. The bench documents its settings in its
// opening comment, which --help prints, so they are written once.
import { runAfterCommandLine } from './command.js'

await runAfterCommandLine(new URL('bench.ts', import.meta.url), 'npm run -s bench')
