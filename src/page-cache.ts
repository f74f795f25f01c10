// Pages of the list kept by the authorization's version (LIST_PAGE_CACHE_BYTES). A read names the
// version of the page kept for it, and the database builds and sends the page only when the
// authorization is at another (db/queries/list.ts). The version changes whenever a page would read
// differently (migrations 0004, 0009), so a kept page is never served stale, whichever instance or
// writer changed the grants, as long as the database never issues a version twice: after a
// failover that lost commits, or a restore to an earlier point, restart the instances
// (docs/scaling.md). What it saves is the page's JSON, built by PostgreSQL and carried to
// the service, on every read of a page that has not changed (docs/performance.md).

/** A page's bytes as sent, and the version they are of. */
export interface KeptPage { version: string, body: Buffer }

// What a kept page costs besides its body and the characters of its key and version, roughly: the
// Map's slot, the entry, the strings' headers, and the body's Buffer, ArrayBuffer and backing store
// (its own, V8's and malloc's bookkeeping). Measured on Node 20, about 420 bytes of heap and more
// off it; counted as 200 until 2026-11-28, many small pages (a client with a few grants, pages past
// the end) took twice the budget (test/src/page-cache.test.ts).
const ENTRY_BYTES = 512

/** The pages served last, up to a number of bytes: the least recently served goes first. */
export class PageCache {
  // A Map iterates in insertion order: a page served is put back at the end, the newest.
  readonly #pages = new Map<string, KeptPage>()
  readonly #maxBytes: number
  #bytes = 0
  #hits = 0
  #misses = 0

  constructor (maxBytes: number) {
    this.#maxBytes = maxBytes
  }

  /** Bytes kept, bodies and entries. */
  get bytes (): number { return this.#bytes }
  /** Pages served as kept: the database sent their version only. */
  get hits (): number { return this.#hits }
  /** Pages the database built, none kept for their version. */
  get misses (): number { return this.#misses }

  /** The page kept under `key`, if any: its version is the one to name to the database. */
  candidate (key: string): KeptPage | undefined {
    return this.#pages.get(key)
  }

  /** `kept` was served: the database found the authorization at its version. */
  served (key: string, kept: KeptPage): void {
    this.#hits++
    if (this.#pages.get(key) !== kept) return
    this.#pages.delete(key)
    this.#pages.set(key, kept)
  }

  /**
   * The database built `page`: kept under `key` in place of what was there, unless larger than a
   * quarter of the budget, or of an older version than the page kept (two reads racing, the one
   * that read the older version finishing last): the cache never goes back to an older state.
   */
  built (key: string, page: KeptPage): void {
    this.#misses++
    const kept = this.#pages.get(key)
    if (kept !== undefined && BigInt(kept.version) > BigInt(page.version)) return
    this.#remove(key, kept)
    const size = sizeOf(key, page)
    if (size * 4 > this.#maxBytes) return
    this.#pages.set(key, ownsItsMemory(page.body) ? page : { version: page.version, body: copyOf(page.body) })
    this.#bytes += size
    for (const [oldest, kept] of this.#pages) {
      if (this.#bytes <= this.#maxBytes) break
      this.#remove(oldest, kept)
    }
  }

  #remove (key: string, kept = this.#pages.get(key)): void {
    if (kept === undefined) return
    this.#pages.delete(key)
    this.#bytes -= sizeOf(key, kept)
  }
}

const sizeOf = (key: string, page: KeptPage) => page.body.length + 2 * (key.length + page.version.length) + ENTRY_BYTES

// A small Buffer.from() is a slice of a block of 8 KiB that Node shares between buffers: kept, a
// page of a few hundred bytes would keep the whole block alive, outside the budget. (A body as
// long as its block starts where the block does.)
const ownsItsMemory = (body: Buffer) => body.byteLength === body.buffer.byteLength

function copyOf (body: Buffer): Buffer {
  const copy = Buffer.allocUnsafeSlow(body.byteLength)
  body.copy(copy)
  return copy
}
