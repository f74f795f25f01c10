// npm run bench:levers: reads the arguments (it takes none; the environment sets it up), then runs
// scripts/bench-levers.ts, whose top level starts PostgreSQL. --help prints that script's opening
// comment, where its settings are written once.
import { runAfterCommandLine } from './command.js'

await runAfterCommandLine(new URL('bench-levers.ts', import.meta.url), 'npm run -s bench:levers')
