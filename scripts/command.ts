// What the npm scripts' commands say, and where: a process writes to stdout and stderr, a test
// runs the same command in-process and keeps the lines.
export interface Output {
  out: (line: string) => void
  err: (line: string) => void
}

/** What a database command says, and the database it works on. */
export interface DatabaseIo extends Output {
  /** Runs the work against the database (DATABASE_URL, or the local embedded one). */
  withDatabase: (work: (url: string) => Promise<void>) => Promise<void>
}

export const processOutput: Output = { out: (line) => console.log(line), err: (line) => console.error(line) }

/** An Output that keeps the lines, as the process would have written them. */
export function capturedOutput (): Output & { stdout: () => string, stderr: () => string } {
  const stdout: string[] = []
  const stderr: string[] = []
  return {
    out: (line) => stdout.push(`${line}\n`),
    err: (line) => stderr.push(`${line}\n`),
    stdout: () => stdout.join(''),
    stderr: () => stderr.join('')
  }
}
