// Traces over OTLP/HTTP, configured by the standard OpenTelemetry variables only (docs/tracing.md).
// Off unless an OTLP endpoint (or OTEL_TRACES_EXPORTER=otlp) is given: then no SDK is even loaded,
// so tracing off costs nothing. On, it must start before pg is loaded: instrumentation-pg patches
// the module as it loads (src/server.ts starts it first, then imports the rest).
import { type Context, type ContextManager, context, diag, type DiagLogger, DiagLogLevel, ROOT_CONTEXT } from '@opentelemetry/api'
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-node'
import type { FastifyBaseLogger, FastifyPluginCallback, FastifyRequest } from 'fastify'

/** Tracing as started: the request spans' plugin, registered first, and the flush at shutdown. */
export interface Tracing {
  fastifyPlugin: FastifyPluginCallback
  /** Ends the batch: what is still buffered is exported (within OTEL_EXPORTER_OTLP_TIMEOUT). */
  shutdown: () => Promise<void>
  /**
   * Where the SDK's diagnostics go from now on, those said before it included: the service's log,
   * once it exists (tracing starts before it).
   */
  reportTo: (log: FastifyBaseLogger) => void
}

const SERVICE_NAME = 'client-permissions-service'
const PROBES = ['/healthz', '/readyz']
/** Characters an attribute's value keeps (OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT; the SDK's default: all). */
const ATTRIBUTE_VALUE_LENGTH_LIMIT = 256
const PROTOCOLS = ['http/protobuf', 'http/json'] as const
const SAMPLERS = [
  'always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio'
]
/** OTEL_LOG_LEVEL's values (any case), the SDK's diagnostics each lets through. */
const LOG_LEVELS: Record<string, DiagLogLevel> = {
  none: DiagLogLevel.NONE,
  error: DiagLogLevel.ERROR,
  warn: DiagLogLevel.WARN,
  info: DiagLogLevel.INFO,
  debug: DiagLogLevel.DEBUG,
  verbose: DiagLogLevel.VERBOSE,
  all: DiagLogLevel.ALL
}

type Env = Record<string, string | undefined>

/** A variable as the OpenTelemetry SDK reads it: unset when empty or blank. */
const valueOf = (env: Env, name: string) => env[name]?.trim() || undefined

export interface TracingSettings {
  protocol: typeof PROTOCOLS[number]
  /** OTEL_LOG_LEVEL: the SDK's diagnostics the log gets; warn unless it says otherwise. */
  logLevel: DiagLogLevel
}

/**
 * Whether the environment asks for traces, and how they are sent; undefined: tracing is off. A
 * setting this service cannot honour is refused with a sentence naming it, rather than ignored:
 * traces silently not sent look like a service that is never called.
 */
export function tracingSettings (env: Env): TracingSettings | undefined {
  if (valueOf(env, 'OTEL_SDK_DISABLED')?.toLowerCase() === 'true') return undefined
  const exporter = valueOf(env, 'OTEL_TRACES_EXPORTER')
  if (exporter === 'none') return undefined
  if (exporter !== undefined && exporter !== 'otlp') {
    throw new Error(`OTEL_TRACES_EXPORTER=${exporter} is not supported: traces are exported as otlp (or none)`)
  }
  const endpoint = valueOf(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT') ?? valueOf(env, 'OTEL_EXPORTER_OTLP_ENDPOINT')
  if (endpoint === undefined && exporter === undefined) return undefined
  const protocolVariable = valueOf(env, 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') !== undefined
    ? 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL'
    : 'OTEL_EXPORTER_OTLP_PROTOCOL'
  const protocol = valueOf(env, protocolVariable) ?? 'http/protobuf'
  if (!(PROTOCOLS as readonly string[]).includes(protocol)) {
    throw new Error(`${protocolVariable}=${protocol} is not supported: traces are sent over OTLP/HTTP (${PROTOCOLS.join(' or ')})`)
  }
  // As the SDK reads them, which takes anything else for its default (every request sampled), with
  // no more than a diagnostic's warning: the sampler's name untrimmed, its ratio a number, from 0
  // to 1, and only for the samplers that take one.
  const sampler = valueOf(env, 'OTEL_TRACES_SAMPLER') === undefined ? undefined : env.OTEL_TRACES_SAMPLER!
  if (sampler !== undefined && !SAMPLERS.includes(sampler)) {
    throw new Error(`OTEL_TRACES_SAMPLER=${sampler} is not one of ${SAMPLERS.join(', ')}`)
  }
  const ratio = valueOf(env, 'OTEL_TRACES_SAMPLER_ARG')
  if (sampler?.endsWith('traceidratio') === true && ratio !== undefined && !(Number(ratio) >= 0 && Number(ratio) <= 1)) {
    throw new Error(`OTEL_TRACES_SAMPLER_ARG=${ratio} is not a ratio from 0 to 1 (a number such as 0.25), which ${sampler} needs`)
  }
  const logLevel = valueOf(env, 'OTEL_LOG_LEVEL')
  if (logLevel !== undefined && !(logLevel.toLowerCase() in LOG_LEVELS)) {
    throw new Error(`OTEL_LOG_LEVEL=${logLevel} is not one of ${Object.keys(LOG_LEVELS).join(', ')}`)
  }
  return { protocol: protocol as TracingSettings['protocol'], logLevel: LOG_LEVELS[logLevel?.toLowerCase() ?? 'warn'] }
}

const EXPORT_FAILED = 'tracing: spans could not be exported, and are dropped until an export succeeds'
const EXPORTS_AGAIN = 'tracing: spans are exported again'
/** Diagnostics kept until the log exists; any beyond are counted. */
const HELD_DIAGNOSTICS = 100

type LogLevel = 'error' | 'warn' | 'info' | 'debug' | 'trace'

/**
 * The SDK's diagnostics (diag), as lines of the service's log, and exports that fail said once per
 * outage. The batch span processor hands each batch that failed to the global error handler, whose
 * default writes it to diag as an error: one line per batch, several a second under load, while
 * the collector is down. So the exporter's results are watched (exporterReporting): the first
 * failure is a warning, with the exporter's error; from then on until an export succeeds, the
 * diagnostics' warnings and errors (those failures, the spans dropped from a full queue) are
 * counted, not written; the export that succeeds again says how many failed. (Not by replacing
 * the handler: it belongs to the copy of @opentelemetry/core each SDK package loads, one today but
 * two while their versions differed, and the spans dropped from a full queue come by diag anyway.)
 */
class Diagnostics implements DiagLogger {
  #log: FastifyBaseLogger | undefined
  #held: Array<[LogLevel, object, string]> = []
  #heldOver = 0
  #failedExports = 0
  #unsaid = 0

  constructor (private readonly level: DiagLogLevel) {}

  error (message: string, ...args: unknown[]): void { this.#diagnostic('error', message, args) }
  warn (message: string, ...args: unknown[]): void { this.#diagnostic('warn', message, args) }
  info (message: string, ...args: unknown[]): void { this.#diagnostic('info', message, args) }
  debug (message: string, ...args: unknown[]): void { this.#diagnostic('debug', message, args) }
  verbose (message: string, ...args: unknown[]): void { this.#diagnostic('trace', message, args) }

  /** An export's outcome: `error` when it failed. */
  exported (error: Error | undefined): void {
    if (this.level === DiagLogLevel.NONE) return
    if (error !== undefined) {
      if (this.#failedExports++ === 0) this.#write('warn', { err: error }, EXPORT_FAILED)
    } else if (this.#failedExports > 0) {
      this.#write('info', { failedExports: this.#failedExports, diagnosticsNotLogged: this.#unsaid }, EXPORTS_AGAIN)
      this.#failedExports = 0
      this.#unsaid = 0
    }
  }

  reportTo (log: FastifyBaseLogger): void {
    this.#log = log
    for (const [level, fields, message] of this.#held) log[level](fields, message)
    if (this.#heldOver > 0) log.warn({ diagnosticsNotLogged: this.#heldOver }, 'tracing: diagnostics of the start not logged')
    this.#held = []
  }

  #diagnostic (level: LogLevel, message: string, args: unknown[]): void {
    if (this.#failedExports > 0 && (level === 'error' || level === 'warn')) {
      this.#unsaid++
      return
    }
    // A component's logger gives its name first, then its message.
    const words = [message, ...args.filter((arg) => typeof arg === 'string')]
    const details = args.filter((arg) => typeof arg !== 'string').map((arg) => arg instanceof Error ? arg.message : arg)
    this.#write(level, details.length > 0 ? { details } : {}, `tracing: ${words.join(' ')}`)
  }

  #write (level: LogLevel, fields: object, message: string): void {
    if (this.#log) this.#log[level](fields, message)
    else if (this.#held.length < HELD_DIAGNOSTICS) this.#held.push([level, fields, message])
    else this.#heldOver++
  }
}

/** `exporter`, its results told to `diagnostics`. */
function exporterReporting (exporter: SpanExporter, diagnostics: Diagnostics, succeeded: (code: number) => boolean): SpanExporter {
  return {
    export (spans: ReadableSpan[], done) {
      exporter.export(spans, (result) => {
        diagnostics.exported(succeeded(result.code) ? undefined : result.error ?? new Error('the exporter gave no reason'))
        done(result)
      })
    },
    shutdown: () => exporter.shutdown(),
    forceFlush: () => exporter.forceFlush?.() ?? Promise.resolve()
  }
}

/**
 * Starts tracing when the environment asks for it (tracingSettings): the SDK, W3C Trace Context
 * propagation, the OTLP exporter (which reads its endpoint, headers and timeout itself), the
 * sampler (OTEL_TRACES_SAMPLER, read by the SDK), and pg's instrumentation.
 */
export async function startTracing (): Promise<Tracing | undefined> {
  // The exporter and the SDK read their own variables from process.env: so does the choice.
  const settings = tracingSettings(process.env)
  if (!settings) return undefined
  // First: the exporter's constructor warns of a setting it cannot read.
  const diagnostics = new Diagnostics(settings.logLevel)
  diag.setLogger(diagnostics, { logLevel: settings.logLevel, suppressOverrideMessage: true })
  const [{ NodeTracerProvider, BatchSpanProcessor }, { W3CTraceContextPropagator, ExportResultCode }, resources, { registerInstrumentations },
    { PgInstrumentation }, { FastifyOtelInstrumentation }, { OTLPTraceExporter }] = await Promise.all([
    import('@opentelemetry/sdk-trace-node'),
    import('@opentelemetry/core'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/instrumentation'),
    import('@opentelemetry/instrumentation-pg'),
    import('@fastify/otel'),
    settings.protocol === 'http/json' ? import('@opentelemetry/exporter-trace-otlp-http') : import('@opentelemetry/exporter-trace-otlp-proto')
  ])
  const provider = new NodeTracerProvider({
    // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the name.
    // The host (a container's id) and an id for this process tell the replicas apart.
    resource: resources.resourceFromAttributes({ 'service.name': SERVICE_NAME })
      .merge(resources.detectResources({ detectors: [resources.hostDetector, resources.serviceInstanceIdDetector, resources.envDetector] })),
    // Unless the standard variables bound them: a statement's text (the list's is 2 KB) would be
    // most of what a trace costs to encode and send; its name is in the span's name.
    ...(valueOf(process.env, 'OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT') ?? valueOf(process.env, 'OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT')
      ? {}
      : { spanLimits: { attributeValueLengthLimit: ATTRIBUTE_VALUE_LENGTH_LIMIT } }),
    spanProcessors: [new BatchSpanProcessor(exporterReporting(new OTLPTraceExporter(), diagnostics, (code) => code === ExportResultCode.SUCCESS))]
  })
  provider.register({ propagator: new W3CTraceContextPropagator(), contextManager: new SynchronousContextManager() })
  // The request's span only: neither the hooks nor the handler get one of their own (a span per
  // hook would cost more than the hooks do; the handler's would repeat the request's). Probes are
  // not traced: a gateway checks them twice a second.
  const fastifyOtel = new FastifyOtelInstrumentation({
    instrumentHooks: false,
    instrumentHandler: false,
    // Asked with the route's path, and with each request's URL (query and all).
    ignorePaths: ({ url }) => PROBES.includes(url.split('?')[0])
  })
  registerInstrumentations({
    tracerProvider: provider,
    instrumentations: [
      fastifyOtel,
      // Statements only inside a request (or another span): not the pool's own checks. Their text
      // has $n placeholders; the values never go into a span (enhancedDatabaseReporting off).
      // Taking a connection from the pool gets no span of its own: the statement's span starts
      // once it has one.
      new PgInstrumentation({ requireParentSpan: true, enhancedDatabaseReporting: false, ignoreConnectSpans: true, requestHook: withoutLiterals })
    ]
  })
  return {
    fastifyPlugin: fastifyOtel.plugin(),
    shutdown: () => provider.shutdown(),
    reportTo: (log) => { diagnostics.reportTo(log) }
  }
}

/**
 * A statement sent without parameters may have values written into its text as literals: the
 * change's BEGIN takes its locks with the path's ids escaped into it (db/queries/change.ts), no
 * round trip of their own. Its text goes into the span with every literal as '?'. A statement
 * with parameters is left whole: its values are bound, its literals the code's own.
 */
function withoutLiterals (span: { setAttribute: (name: string, value: string) => unknown }, { query }: { query: { text: string, values?: unknown } }): void {
  if (query.values === undefined && query.text.includes("'")) span.setAttribute('db.query.text', query.text.replace(/'(?:[^']|'')*'/g, "'?'"))
}

/**
 * The active trace context for synchronous calls only: `with` makes a context active for the call it
 * wraps, and no longer. The SDK's default keeps it across awaits with AsyncLocalStorage, which on
 * Node 20 runs a hook on every promise of the process, traced or not: measured, a tenth of page 0's
 * throughput with no request sampled (docs/performance.md). Here the context goes where it is
 * needed by hand: the tracing plugin runs each handler in its request's context, and a pooled
 * client carries the context it was checked out in to every statement it sends (db/pool.ts).
 */
export class SynchronousContextManager implements ContextManager {
  #active: Context = ROOT_CONTEXT

  active (): Context {
    return this.#active
  }

  with<A extends unknown[], F extends (...args: A) => ReturnType<F>> (context: Context, fn: F, thisArg?: ThisParameterType<F>, ...args: A): ReturnType<F> {
    const outer = this.#active
    this.#active = context
    try {
      return fn.call(thisArg, ...args)
    } finally {
      this.#active = outer
    }
  }

  bind<T> (context: Context, target: T): T {
    if (typeof target !== 'function') return target
    const manager = this
    return function bound (this: unknown, ...args: unknown[]) {
      return manager.with(context, target as (...args: unknown[]) => unknown, this, ...args)
    } as T
  }

  enable (): this {
    return this
  }

  disable (): this {
    this.#active = ROOT_CONTEXT
    return this
  }
}

/** What the request span needs to say about a request; a no-op for a request not traced. */
export interface SpanOfRequest {
  setAttribute: (name: string, value: string | number) => unknown
  updateName: (name: string) => unknown
  spanContext: () => { traceId: string, spanId: string }
  end: () => unknown
}

interface RequestTelemetry { enabled: boolean, span?: SpanOfRequest | null, context?: Context | null }

/** @fastify/otel's view of the request, when tracing is on and this request is traced. */
function tracedTelemetry (request: FastifyRequest): RequestTelemetry | undefined {
  const telemetry = (request as FastifyRequest & { opentelemetry?: () => RequestTelemetry }).opentelemetry
  if (telemetry === undefined) return undefined
  const seen = telemetry.call(request)
  return seen.enabled ? seen : undefined
}

/** The request's trace context (its span's), when tracing is on and this request is traced. */
export function requestContext (request: FastifyRequest): Context | undefined {
  return tracedTelemetry(request)?.context ?? undefined
}

/**
 * Calls `send` in the request's trace context (as it is when the request is not traced): for a
 * statement sent after the handler's first await, where the context is lost (SynchronousContextManager).
 */
export function inRequestContext<T> (request: FastifyRequest, send: () => T): T {
  const traced = requestContext(request)
  return traced ? context.with(traced, send) : send()
}

/** The request's span, when tracing is on and this request is traced (@fastify/otel's decorator). */
export function requestSpan (request: FastifyRequest): SpanOfRequest | undefined {
  return tracedTelemetry(request)?.span ?? undefined
}

/**
 * Ends the request's span (when traced) for a request left without an answer: a stream whose
 * consumer was gone before its handler ran returns the reply unsent, so no onSend hook (where
 * @fastify/otel ends the span) or onResponse hook ever runs, and the span would stay open,
 * never exported. It ends with no status code, none having been sent.
 */
export function endUnanswered (request: FastifyRequest): void {
  requestSpan(request)?.end()
}
