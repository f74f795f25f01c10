// A header field as it came on the wire. Node keeps only the first of several lines of Host,
// Authorization, Content-Type and a few other fields in request.headers; RFC 9110 §5.3 reads
// several lines of one field as one comma-separated list.
import type { IncomingMessage } from 'node:http'

/** The value of each line of the field `name` (given in lower case), in the order they came. */
export function headerLines (request: IncomingMessage, name: string): string[] {
  const lines: string[] = []
  const { rawHeaders } = request
  for (let i = 0; i < rawHeaders.length; i += 2) {
    if (rawHeaders[i].length === name.length && rawHeaders[i].toLowerCase() === name) lines.push(rawHeaders[i + 1])
  }
  return lines
}
