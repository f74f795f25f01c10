// The process's entry point. Tracing, when the OTEL_* variables ask for it, starts before anything
// else is loaded: pg's instrumentation patches pg as it loads (src/tracing.ts). Then the service.
import { startTracing, type Tracing } from './tracing.js'

let tracing: Tracing | undefined
try {
  tracing = await startTracing()
} catch (error) {
  console.error((error as Error).message)
  process.exit(1)
}
const { serve } = await import('./serve.js')
await serve(tracing)
