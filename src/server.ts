// The process's entry point (npm start, the container's command). It takes no arguments: it is
// configured by environment variables (docs/configuration.md), so --help/-h says that and starts
// nothing, and any other argument is refused rather than ignored. Tracing, when the OTEL_*
// variables ask for it, starts before anything else is loaded: pg's instrumentation patches pg as
// it loads (src/tracing.ts). Then the service. A SIGTERM, SIGINT or SIGHUP stops the start from the
// first moment (src/start-signals.ts), until the service listens and drains on them instead.
import { readCommandLine } from './command-line.js'
import { stopStartOnSignal } from './start-signals.js'
import { startTracing, type Tracing } from './tracing.js'

const commandLine = readCommandLine({
  usage: 'npm start',
  about: 'Runs the service. It is configured by environment variables, not arguments: docs/configuration.md lists\n' +
    'them. Without DATABASE_URL (and outside production) it runs on an embedded PostgreSQL in .data/ with demo\n' +
    'data, and prints a token to try it with.',
  options: {}
}, process.argv.slice(2))
if (typeof commandLine === 'number') process.exit(commandLine)
const starting = stopStartOnSignal()

let tracing: Tracing | undefined
try {
  tracing = await startTracing()
} catch (error) {
  console.error((error as Error).message)
  process.exit(1)
}
const { serve } = await import('./serve.js')
await serve(tracing, starting)
