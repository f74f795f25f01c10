// The service's JSON log lines as a test captures them (build()'s `logs`), to wait on a line
// rather than sleep.
import { Writable } from 'node:stream'

export type LogLine = Record<string, unknown>

export interface CapturedLogs {
  /** Hand to build() as `logs`. */
  stream: Writable
  lines: LogLine[]
  /** The first line that matches, waiting for it to be written if need be (up to 10 s). */
  waitFor: (matches: (line: LogLine) => boolean, what: string) => Promise<LogLine>
}

/** The service's JSON log lines as they are written, to wait on rather than sleep for. */
export function captureLogs (): CapturedLogs {
  const lines: LogLine[] = []
  const waiting = new Set<() => void>()
  const stream = new Writable({
    write (chunk, _encoding, done) {
      for (const text of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(text))
      for (const check of waiting) check()
      done()
    }
  })
  function waitFor (matches: (line: LogLine) => boolean, what: string): Promise<LogLine> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => { waiting.delete(check); reject(new Error(`no log line: ${what}`)) }, 10_000)
      function check () {
        const line = lines.find(matches)
        if (!line) return
        clearTimeout(timer)
        waiting.delete(check)
        resolve(line)
      }
      waiting.add(check)
      check()
    })
  }
  return { stream, lines, waitFor }
}
