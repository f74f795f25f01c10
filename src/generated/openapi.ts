// DO NOT EDIT. TypeScript types of the API, generated from openapi/openapi.yaml by `npm run generate`.
export interface paths {
    "/healthz": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Liveness probe
         * @description Answers 200 while the process is running; does not touch the database.
         */
        get: operations["getLiveness"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/permission_changes": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * The change feed — every change, across resources and clients, oldest first
         * @description Every entry of the change history (what `.../permission_changes` of one client lists), across
         *     resources and clients, with `resource_id` and `client_id`, oldest first: for caches, search
         *     indexes, audit sinks and webhook senders that follow permission changes.
         *
         *     **Order no reader can miss.** `id` is the cursor: pass the last `id` you have as `after`, or
         *     follow `Link: rel="next"`. A reader that has seen `id` N is never later offered a smaller
         *     one: an entry is returned only once no transaction still running could commit an entry
         *     before it (docs/change-feed.md). So a change is held back while an older transaction is
         *     open anywhere on the database server, and appears after it ends; it is never skipped and
         *     never repeated. One client's changes on one resource appear in the order they were applied.
         *
         *     **Polled or streamed.** With `Accept: application/json` (or none), one page: `[]` when
         *     nothing is newer yet, and always `Link: rel="next"` to poll again from. With `Accept:
         *     text/event-stream`, Server-Sent Events: each entry as an event whose `id:` is the entry's
         *     `id` and whose `data:` is its JSON, from `after` or the `Last-Event-ID` header (which wins),
         *     and then each new change within about a second of its commit; a comment line (`:`) at least
         *     every `FEED_HEARTBEAT_MS` (10 s) keeps gateways from closing an idle stream. With
         *     `resource_id`, an idle stream may also send an `id:` line alone (no data, so no event): the
         *     cursor, past other resources' changes, that EventSource keeps as its `Last-Event-ID`, so that
         *     a prune of those changes does not answer its resumption 410; so does, once, a stream opened
         *     without a cursor that has no change to send, so that its consumer, resuming after a prune of
         *     changes recorded since, is told 410 instead of starting past them. A consumer that
         *     reads slower than changes arrive is disconnected once more than `FEED_STREAM_BUFFER_BYTES`
         *     wait for it besides the last page it was given, and resumes with `Last-Event-ID`; so is one
         *     that takes none of what waits for it for `FEED_STALL_TIMEOUT_MS` (60 s); beyond `FEED_MAX_STREAMS` open streams on a replica a
         *     new one answers 503 `overloaded`; on shutdown streams end, and clients reconnect elsewhere
         *     (one asked for while the replica closes, even while its first page is read, answers 503
         *     `shutting-down`).
         *     A stream lives no longer than the token that opened it: once the token is no longer
         *     accepted (its `exp`, with the 30 s of clock tolerance every check allows), the stream ends
         *     at its next heartbeat, cleanly, and the client resumes with `Last-Event-ID` and a token
         *     that is still good.
         *
         *     **Retention.** The prune command deletes old changes; a cursor older than the newest change
         *     it deleted answers 410 `changes-pruned`, instead of continuing past the gap. Without
         *     `after`, the feed starts at the oldest change kept.
         *
         *     The feed carries no `ETag`: `If-Match` and `If-None-Match` are ignored, whatever their
         *     value (no 304, no 412, no 400); a follower keeps its place with `after`.
         */
        get: operations["listAllPermissionChanges"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/problems/{name}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * What a problem type means, and what to do about it
         * @description Every problem's `type` (`/problems/resource-not-found`, …) is a URL of this service: opened,
         *     it answers the type's title, status, when it happens and what to do, as the table in the
         *     `Problem` schema says. A small self-contained HTML page by default (a `type` followed in a
         *     browser, or by `curl`); with `Accept: application/json`, the same as JSON. An `Accept` that
         *     names neither gets the page. No token needed, and never shed under load, like the probes.
         *     `HEAD` answers as `GET`, without the body.
         */
        get: operations["getProblemType"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/readyz": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Readiness probe
         * @description Answers 200 when the database answers within `READINESS_TIMEOUT_MS` (1 s): `SELECT 1` on
         *     the probe's own connection, or, when that probe fails (slow, or refused one more connection
         *     under load) and the replica's pool has not found the database unreachable, one of the
         *     pool's own queries. A replica that is saturated or shedding load is still ready, because
         *     the database is there and other replicas are no better off. Answers 503
         *     `database-unavailable` when the database cannot be reached, 503 `starting` until a sample of
         *     the event loop has found it calm since the replica started (the lag of its own start would
         *     shed the first requests sent to it; never with `MAX_EVENT_LOOP_DELAY_MS=0`; once calm, later
         *     lag does not make it unready), and 503 `shutting-down` once the
         *     replica has begun shutting down. The probe never queues behind API traffic, and concurrent
         *     probes share one query.
         *     With read replicas (`DATABASE_REPLICA_URLS`), a primary that cannot be reached while a
         *     replica is up still answers 200: the replicas serve reads, and writes answer 503
         *     `database-unavailable` (docs/scaling.md).
         */
        get: operations["getReadiness"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/resources/{resource_id}/authorized_clients/{client_id}/permission_changes": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /**
                 * @description The client's id, compared exactly; one path segment, so percent-encoded (`/` as `%2F`, a space as `%20`).
                 * @example billing-app
                 */
                client_id: components["parameters"]["ClientId"];
                /**
                 * @description The resource's id, compared exactly; one path segment, so percent-encoded (`/` as `%2F`, a space as `%20`).
                 * @example orders-api
                 */
                resource_id: components["parameters"]["ResourceId"];
            };
            cookie?: never;
        };
        /**
         * The history of changes to a client's permissions on a resource
         * @description Every DELETE or POST that changed the client's grants on the resource, newest first: when,
         *     what (`granted` or `unauthorized`, and the ids actually changed, in request order, each
         *     once), who (the token's `sub`, and `client_id` or else `azp`) and the request's id. Written
         *     in the same transaction as the change; a request that changed nothing or was refused records
         *     nothing. Paged by a cursor: `before` is the `id` of the last change seen, and `Link:
         *     rel="next"` names the next page while older changes exist. The history outlives what it
         *     describes: once a change is recorded it is listed even after the authorization, the client
         *     or the resource is gone, until the prune command deletes it; without any kept, the list's
         *     three 404s answer, in its order. Each change
         *     is also announced, at commit, on the PostgreSQL channel `permission_changes`. The history
         *     carries no `ETag`: `If-Match` and `If-None-Match` are ignored, whatever their value (no 304,
         *     no 412, no 400); a caller walking it while it grows follows its cursor.
         */
        get: operations["listPermissionChanges"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/resources/{resource_id}/authorized_clients/{client_id}/permissions": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /**
                 * @description The client's id, compared exactly; one path segment, so percent-encoded (`/` as `%2F`, a space as `%20`).
                 * @example billing-app
                 */
                client_id: components["parameters"]["ClientId"];
                /**
                 * @description The resource's id, compared exactly; one path segment, so percent-encoded (`/` as `%2F`, a space as `%20`).
                 * @example orders-api
                 */
                resource_id: components["parameters"]["ResourceId"];
            };
            cookie?: never;
        };
        /**
         * List the permissions granted to a client on a resource
         * @description Returns one page of the permissions granted to the client on the resource.
         *     `offset` is a page number: `limit * offset` records are skipped, computed exactly even past
         *     2^53. A page past the end is an empty array, not an error. Results are ordered by `sort_by`
         *     and then by `id`, so pages are stable. `X-Total-Count` counts every grant of this client on
         *     this resource; `Link` (RFC 8288) gives `first`, `prev`, `next` and `last` pages, keeping
         *     `limit` and `sort_by`. `prev` is omitted on page 0 and points at the last page when the
         *     requested page is past the end; `next` is omitted on the last page and beyond. Every page
         *     carries the same `ETag`, the version of the grants: sent in `If-Match` with each next page,
         *     it makes a walk through the pages read one version, or stop with 412 when the grants changed.
         */
        get: operations["listClientPermissions"];
        put?: never;
        /**
         * Grant permissions to a client on a resource
         * @description The inverse of DELETE: grants the listed permissions within the client's existing
         *     authorization on the resource, in one transaction. Ids already granted are ignored, so a
         *     retried request still answers 204. If any id is not a permission of the resource the request
         *     answers 422 naming every such id and grants nothing. Duplicated ids are allowed. A grant holds the resource id, the
         *     client id and the permission's id, name and description in the database's indexes, which
         *     take about 2,700 bytes of UTF-8 together: ids of multi-byte characters near their bound can
         *     be over it, and the request then answers 422 `grant-too-large` and grants nothing. The client
         *     must already be authorized on the resource (404 `client-not-authorized` otherwise:
         *     authorizing a client is another operation). `If-Match` and `If-None-Match` work as for DELETE. A malformed one is 400
         *     (before the 404s); then the 404s come first, then 412, then 422.
         */
        post: operations["grantClientPermissions"];
        /**
         * Remove permissions from a client on a resource
         * @description Removes the listed permissions from the client's authorization on the resource, in one
         *     transaction. Ids that are permissions of the resource but are not granted are ignored, so a
         *     retried request still answers 204. If any id is not a permission of the resource the request
         *     answers 422 naming every such id and removes nothing. Duplicated ids are allowed. The
         *     authorization itself remains, even when its last permission is removed. With `If-Match`
         *     (the list's `ETag`), nothing is removed and the answer is 412 when the client's grants
         *     changed since; the check and the removal are one statement, so of two callers holding the
         *     same tag one succeeds and the other gets 412. `If-None-Match` is honoured too (RFC 9110
         *     §13.1.2): 412 when it names the current version or is `*`. A malformed `If-Match` or
         *     `If-None-Match` is 400 (before the 404s); then the 404s come first, then 412 (`If-Match`
         *     before `If-None-Match`), then 422.
         */
        delete: operations["unauthorizeClientPermissions"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
}
export type webhooks = Record<string, never>;
export interface components {
    schemas: {
        ChangeId: string;
        ChangesPrunedProblem: components["schemas"]["Problem"] & {
            /** @description The newest change the prune command has deleted; every change kept is after it. */
            pruned_through: string;
        };
        EntityId: string;
        /** @description `*` or a list of entity-tags (RFC 9110 §8.8.3, §13.1.1), as If-Match and If-None-Match take. */
        EntityTags: string;
        /** @description One entry of the change feed — a change of the history, with the resource and client it changed. */
        FeedChange: {
            /** @enum {string} */
            action: "granted" | "unauthorized";
            /** @description From the verified token; a claim the token did not carry is left out. */
            actor: {
                /** @description The token's `client_id`, or else its `azp`. */
                client_id?: string;
                sub?: string;
            };
            /**
             * Format: date-time
             * @description When the change's transaction began (RFC 3339).
             */
            at: string;
            client_id: components["schemas"]["EntityId"];
            /**
             * @description Increasing along the feed; the cursor for `after`.
             * @example 11456300564480
             */
            id: string;
            /** @description The ids actually changed, in request order, each once. */
            permission_ids: components["schemas"]["PermissionId"][];
            /** @description The request's id (its `X-Request-Id`; the gateway's when sane). */
            request_id: string;
            resource_id: components["schemas"]["EntityId"];
        };
        Health: {
            /** @enum {string} */
            status: "ok";
        };
        InsufficientScopeProblem: components["schemas"]["Problem"] & {
            /**
             * @description The scope the operation needs (as `WWW-Authenticate`'s `scope`; space-separated if ever several).
             * @example read:resource
             */
            required_scope: string;
        };
        Permission: {
            /**
             * @description Additional information about the permission.
             * @example Read orders
             */
            description?: string;
            id: components["schemas"]["PermissionId"];
            /**
             * @description Unique within its resource; a verb and a noun separated by a colon, no spaces.
             * @example read:orders
             */
            name: string;
        };
        /** @description One request that changed a client's grants on a resource. */
        PermissionChange: {
            /** @enum {string} */
            action: "granted" | "unauthorized";
            /** @description From the verified token; a claim the token did not carry is left out. */
            actor: {
                /** @description The token's `client_id`, or else its `azp`. */
                client_id?: string;
                sub?: string;
            };
            /**
             * Format: date-time
             * @description When the change's transaction began (RFC 3339).
             */
            at: string;
            /**
             * @description The cursor for `before`. Within one authorization's history, larger for each change applied after another; across histories, not the order of their commits (the change feed orders those, docs/change-feed.md).
             * @example 42
             */
            id: string;
            /** @description The ids actually changed, in request order, each once. */
            permission_ids: components["schemas"]["PermissionId"][];
            /** @description The request's id (its `X-Request-Id`; the gateway's when sane). */
            request_id: string;
        };
        /**
         * @description The `id` of a Permission.
         * @example perm_read_orders
         */
        PermissionId: string;
        /**
         * @description An RFC 9457 problem details object (`application/problem+json`), the body of every error.
         *     The `type` URIs below are relative references that identify the problem; they are stable
         *     and meant to be compared as strings. Each can be opened (`GET /problems/{name}`, no token)
         *     for its row as a page, or as JSON:
         *
         *     | type | title | status | when it happens | what to do |
         *     |---|---|---|---|---|
         *     | `/problems/invalid-request` | Invalid request | 400 | a parameter or the body broke the contract: a value out of range or of the wrong form, a header that is not the syntax it takes, or a query parameter the operation does not have; `errors[]` says where (`location`, `pointer`) and why | Correct what each entry of `errors[]` names and send the request again. The operations, their parameters and the forms they take are in the API documentation (`/docs`); a query parameter the operation does not have is refused rather than ignored, with a hint when its name is close to one it has (`page`: `offset` is the page number). |
         *     | `/problems/malformed-body` | Malformed body | 400 | the body is missing, empty, not UTF-8 or not parseable JSON, its `Content-Length` does not match it, or it was sent with a transfer coding other than `chunked`; `detail` says what to send | Send a JSON array of 1 to 500 permission ids, such as `["perm_read_orders"]`, with `Content-Type: application/json`. |
         *     | `/problems/missing-credentials` | Missing credentials | 401 | no Bearer token was sent | Send the header `Authorization: Bearer <token>` with an access token carrying the operation's scope. Locally, `npm start` prints a demo token and `npm run -s token` signs one; elsewhere, ask the identity provider the service trusts. |
         *     | `/problems/invalid-token` | Invalid token | 401 | the token is malformed, expired, not yet valid or not signed by a trusted key (or its issuer, audience or type is not the one the service is configured with); `detail` and `WWW-Authenticate` say which | Get a new token and send the request again. A fresh token that is still refused was issued for another service, or signed by a key this one does not trust. |
         *     | `/problems/insufficient-scope` | Insufficient scope | 403 | the token lacks the operation's scope | Send a token carrying the scope that `required_scope` (and `WWW-Authenticate`) names: `read:resource` to read the permissions, the history and the feed, `delete:resource` to unauthorize, `create:resource` to grant. |
         *     | `/problems/resource-not-found` | Resource not found | 404 | no resource has that id | Check the resource id in the path: ids are compared exactly, case included. |
         *     | `/problems/client-not-found` | Client not found | 404 | no client has that id | Check the client id in the path: ids are compared exactly, case included. |
         *     | `/problems/client-not-authorized` | Client not authorized on resource | 404 | the client exists but is not authorized on the resource | Check that the resource and the client are the ones meant. Permissions are granted only within an existing authorization; authorizing a client on a resource is not an operation of this service. |
         *     | `/problems/changes-pruned` | Changes pruned | 410 | the feed's `after` (or `Last-Event-ID`) is older than the newest change the prune command deleted: changes after it are gone | Rebuild what you derived from the feed, then read it again without `after`, from the oldest change kept; `pruned_through` names the newest change deleted. |
         *     | `/problems/precondition-failed` | Precondition failed | 412 | the `If-Match` names no current `ETag`: the grants changed since; or (on a change) the `If-None-Match` names the current one, or is `*`; nothing was changed, and the list served no page | GET the list again for its current `ETag`, check that the change still makes sense, and send it again with that `ETag` in `If-Match`. After an `If-None-Match`: the grants are at a version it names, as the caller meant to avoid. On the list: read it again from its first page, whose `ETag` names the version to walk. |
         *     | `/problems/unknown-permissions` | Unknown permissions | 422 | some ids are not permissions of the resource; `unknown_permission_ids` lists them; nothing was changed | Correct or drop the ids that `unknown_permission_ids` lists, and send the whole request again. |
         *     | `/problems/grant-too-large` | Grant too large | 422 | a grant is too large for the database to store: a grant holds the resource id, the client id and the permission's id, name and description, which must fit in about 2,700 bytes of UTF-8 together (only ids of multi-byte characters near their 255-character bound come close); nothing was granted | Nothing a retry can change: the ids, or the permission's name and description, must be shorter. Rename them (new ids, or new names and descriptions) and grant again. |
         *     | `/problems/database-unavailable` | Database unavailable | 503 | the database cannot be reached (connection refused or timed out, connection lost, server shutting down, no answer to a query) | Retry after `Retry-After` seconds. A DELETE or POST may have been applied all the same (its `COMMIT` can reach the database unanswered): without `If-Match` sending it again is safe, as it is idempotent; with `If-Match`, GET the list first, as its `ETag` has moved on if the change was made. If it lasts, the service's database is down or out of reach (its `/readyz` says so too). |
         *     | `/problems/keys-unavailable` | Signing keys unavailable | 503 | the identity provider's key set (`JWKS_URL`) cannot be fetched now, and none fetched within 6 × `JWKS_CACHE_MAX_AGE_MS` (an hour by default) is held | Retry after `Retry-After` seconds. The token is not at fault: if it lasts, the identity provider or the service's `JWKS_URL` is. |
         *     | `/problems/overloaded` | Overloaded | 503 | more requests than this replica can serve now, answered at once instead of queued: no database connection became free within `DATABASE_CONNECTION_WAIT_MS` (1 s) or the database refused one more, the database cancelled a statement past `DATABASE_STATEMENT_TIMEOUT_MS` (5 s; a change's wait for its locks past half of it), or the event loop lags, or (a change feed stream) `FEED_MAX_STREAMS` streams are open already; nothing was changed | Retry after `Retry-After` seconds, and spread retries out rather than sending them all at once. A change feed consumer refused a stream can poll instead. |
         *     | `/problems/starting` | Starting | 503 | (readiness only) this replica has started, but no sample has found its event loop calm yet | Nothing, or send the request to another replica: this one is sent traffic once a sample finds its event loop calm and `/readyz` answers 200. |
         *     | `/problems/shutting-down` | Shutting down | 503 | (readiness, and a change feed stream asked for while closing) this replica is shutting down | Send the request to another replica: the gateway stops sending traffic here. A change feed consumer reconnects with `Last-Event-ID` and resumes where it was. |
         *     | `about:blank` | the status phrase | any | a plain HTTP error (unknown route or problem type, wrong method, body too large, unsupported media type, request timeout, headers too large, malformed HTTP or URL, internal error); `title` is the RFC 9110 status phrase. Errors of the HTTP layer itself (malformed HTTP or URL, 408, 431) are answered before authentication | what `detail` says |
         */
        Problem: {
            /**
             * @description What went wrong with this request.
             * @example There is no resource with id "orders-api".
             */
            detail: string;
            /**
             * @description The request's id, as in its `X-Request-Id` response header and the service's logs.
             * @example 8d1c2f0e-5b7a-4c1e-9a51-1f0f8f3c2b6d
             */
            request_id?: string;
            /**
             * @description The HTTP status code, repeated.
             * @example 404
             */
            status: number;
            /**
             * @description Short summary of the problem type.
             * @example Resource not found
             */
            title: string;
            /**
             * Format: uri-reference
             * @description Identifies the problem type (see the table in the API description).
             * @example /problems/resource-not-found
             */
            type: string;
        } & {
            [key: string]: unknown;
        };
        /** @description A problem type: what `GET /problems/{name}` answers as JSON. */
        ProblemType: {
            /**
             * @description The HTTP status they are answered with.
             * @example 404
             */
            status: number;
            /**
             * @description The `title` of the problems of this kind.
             * @example Resource not found
             */
            title: string;
            /**
             * Format: uri-reference
             * @description The `type` of the problems of this kind (and the URL of this page).
             * @example /problems/resource-not-found
             */
            type: string;
            /**
             * @description What the caller can do about it (CommonMark; names in backticks).
             * @example Check the resource id in the path: ids are compared exactly, case included.
             */
            what_to_do: string;
            /**
             * @description When it happens (CommonMark; names in backticks).
             * @example no resource has that id
             */
            when: string;
        };
        UnknownPermissionsProblem: components["schemas"]["Problem"] & {
            unknown_permission_ids: string[];
        };
        /** @description A problem with the list of contract violations found in the request. */
        ValidationProblem: components["schemas"]["Problem"] & {
            errors?: {
                /** @enum {string} */
                location: "path" | "query" | "header" | "body";
                message: string;
                /** @description JSON pointer to the offending value within its location. */
                pointer: string;
            }[];
        };
    };
    responses: {
        /** @description A path or query parameter, a header (such as `If-Match` or `Consistency-Token`) or the body broke the contract (`invalid-request`, whose `errors[]` names each cause), or the body is not JSON (`malformed-body`). */
        BadChangeRequest: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                "application/problem+json": components["schemas"]["ValidationProblem"];
            };
        };
        /** @description A parameter or the body broke the contract, or the body is not JSON. */
        BadRequest: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                "application/problem+json": components["schemas"]["ValidationProblem"];
            };
        };
        /** @description The feed's `after` is older than the newest change the prune command deleted; changes after it are gone. */
        ChangesPruned: {
            headers: {
                "Consistency-Token": components["headers"]["Consistency-Token"];
                /**
                 * @description `Accept` on a poll, `Accept, Last-Event-ID` on a stream: which cursor was pruned depends on them.
                 * @example Accept
                 */
                Vary: string;
                [name: string]: unknown;
            };
            content: {
                "application/problem+json": components["schemas"]["ChangesPrunedProblem"];
            };
        };
        /** @description The body is larger than 256 KiB. */
        ContentTooLarge: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /** @description The token lacks the operation's scope. */
        Forbidden: {
            headers: {
                /** @description `Bearer error="insufficient_scope", scope="…"` (RFC 6750). */
                "WWW-Authenticate": string;
                [name: string]: unknown;
            };
            content: {
                "application/problem+json": components["schemas"]["InsufficientScopeProblem"];
            };
        };
        /** @description The request headers are larger than the server accepts (128 KiB). */
        HeadersTooLarge: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /** @description The service is alive (or ready). */
        Health: {
            headers: {
                /**
                 * @description `no-store`: a probe's answer is about this moment, and nothing on the way may keep it.
                 * @example no-store
                 */
                "Cache-Control": string;
                [name: string]: unknown;
            };
            content: {
                "application/json": components["schemas"]["Health"];
            };
        };
        /** @description An unexpected error; details are logged, never returned. */
        InternalError: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /** @description The resource or the client does not exist, or the client is not authorized on the resource. */
        NotFound: {
            headers: {
                "Consistency-Token": components["headers"]["Consistency-Token"];
                [name: string]: unknown;
            };
            content: {
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /** @description The client's grants are unchanged since the `ETag` given in `If-None-Match`. */
        NotModified: {
            headers: {
                "Consistency-Token": components["headers"]["Consistency-Token"];
                ETag: components["headers"]["ETag"];
                [name: string]: unknown;
            };
            content?: never;
        };
        /**
         * @description The replica is not ready: starting, shutting down, or its database cannot be reached. Like a
         *     ready answer, about this moment only (`Cache-Control: no-store`): a cache that kept it would
         *     hold the replica out of its pool after it became ready.
         */
        NotReady: {
            headers: {
                /**
                 * @description `no-store`: nothing on the way may keep the answer.
                 * @example no-store
                 */
                "Cache-Control": string;
                /** @description Seconds to wait before retrying. */
                "Retry-After": number;
                [name: string]: unknown;
            };
            content: {
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /** @description The client's grants changed since the `ETag` given in `If-Match`, or (on a change) are at a version `If-None-Match` names (or it is `*`); nothing was changed, and the list served no page. */
        PreconditionFailed: {
            headers: {
                "Consistency-Token": components["headers"]["Consistency-Token"];
                [name: string]: unknown;
            };
            content: {
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /** @description The request did not arrive in full within Node's header and request timeouts. */
        RequestTimeout: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /**
         * @description The database cannot be reached (`database-unavailable`), the replica has more requests than
         *     it can serve now (`overloaded`: shed at once, nothing changed), or, for readiness, the
         *     replica is starting or shutting down (`shutting-down` also answers a change feed stream
         *     asked for while it closes); retry after `Retry-After` seconds.
         */
        ServiceUnavailable: {
            headers: {
                /** @description Seconds to wait before retrying. */
                "Retry-After": number;
                [name: string]: unknown;
            };
            content: {
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /** @description No Bearer token, or an invalid one. */
        Unauthorized: {
            headers: {
                /** @description `Bearer`, with `error="invalid_token"` when a token was sent (RFC 6750). */
                "WWW-Authenticate": string;
                [name: string]: unknown;
            };
            content: {
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
        /**
         * @description The body is not `application/json` in UTF-8 (another media type, or another `charset`), or
         *     it is content-encoded (`Content-Encoding` other than `identity`).
         */
        UnsupportedMediaType: {
            headers: {
                /**
                 * @description `identity` when the body was refused for its content coding (RFC 9110 §15.5.16): the
                 *     service takes no content coding of a request body. Absent on the other 415s.
                 */
                "Accept-Encoding"?: "identity";
                [name: string]: unknown;
            };
            content: {
                "application/problem+json": components["schemas"]["Problem"];
            };
        };
    };
    parameters: {
        /**
         * @description The client's id, compared exactly; one path segment, so percent-encoded (`/` as `%2F`, a space as `%20`).
         * @example billing-app
         */
        ClientId: components["schemas"]["EntityId"];
        /**
         * @description The `Consistency-Token` of an earlier answer (with replicas, `DATABASE_REPLICA_URLS`): the
         *     answer is taken from a state at least as new as the one that answer showed or made, by a
         *     replica that has replayed it or else by the primary, so a caller that passes on the latest
         *     token it was given never sees its grants go back in time. Opaque: send it as received. A
         *     value that is not a token answers 400 `invalid-request` with the pointer
         *     `/consistency-token`. A token of a state no server has reached (another deployment's, or
         *     one given before a failover that lost commits) is answered by the primary, from its
         *     current state and with its own token, which is older. Without replicas it is checked and
         *     otherwise ignored: there is one state to read.
         * @example 0/3000148
         */
        ConsistencyToken: string;
        /**
         * @description The `ETag` of the list as last read, or `*`: the change is made only if the client's grants
         *     have not changed since, else 412 and nothing changes; `*` holds whenever the client is
         *     authorized. As RFC 9110 §13.1.1 writes it: `*`, or a comma-separated list of entity-tags
         *     (`"1042"`, `W/"1042"`; spaces or tabs around the commas and empty elements are allowed), any
         *     of which may match. Strong comparison: a weak tag never matches. An `ETag` of this service
         *     is a version in decimal, without leading zeros, from 1 to 9223372036854775807; any other
         *     well-formed tag (`"01042"`, `"0"`, `"abc"`, a number past that) names no version and
         *     answers 412. A header that is not this syntax (an unquoted `1042`, `"1042" x`, `*` inside a
         *     list, a list with no tag) or is longer than 8192 characters answers 400 `invalid-request`
         *     with the pointer `/if-match`; it is checked with the other parameters, after authentication
         *     and before the resource, the client and the authorization are looked up (so before the 404s).
         */
        IfMatch: components["schemas"]["EntityTags"];
        /**
         * @description The `ETag` of a page already read, or `*`: the page is answered only if the client's grants
         *     are still at a version it names, else 412 `precondition-failed` (RFC 9110 §13.1.1), and no
         *     page of another version is served. Sent with each next page, it makes a walk through the
         *     pages read one version of the grants: no permission seen twice or missed because a change
         *     came between two pages. `*` holds whenever the client is authorized. Strong comparison, as
         *     on a change: a weak tag never matches, nor does a tag that names no version (`"01042"`,
         *     `"abc"`). Evaluated before `If-None-Match`, and after the 404s. The same syntax and bounds as
         *     the other conditional headers: a header that is not `*` or a list of entity-tags, or longer
         *     than 8192 characters, answers 400 `invalid-request` with the pointer `/if-match`.
         */
        IfMatchOnList: components["schemas"]["EntityTags"];
        /**
         * @description An `ETag` from an earlier answer, or `*`: when it names the current version of the client's
         *     grants (or is `*` and the client is authorized) the answer is 304 with no body. As RFC 9110
         *     §13.1.2 writes it: `*`, or a comma-separated list of entity-tags (`"1042"`, `W/"1042"`;
         *     spaces or tabs around the commas and empty elements are allowed), any of which may match.
         *     Weak comparison: `W/"1042"` matches `"1042"`. A tag is compared as written: `"01042"` is not
         *     `"1042"`. A header that is not this syntax (an unquoted `1042`, `"1042" x`, `*` inside a
         *     list, a list with no tag) or is longer than 8192 characters answers 400 `invalid-request`
         *     with the pointer `/if-none-match`; it is checked with the other parameters, after
         *     authentication and before the resource, the client and the authorization are looked up.
         */
        IfNoneMatch: components["schemas"]["EntityTags"];
        /**
         * @description On a change, RFC 9110 §13.1.2's other precondition: the change is made only if the
         *     client's grants are not at a version it names (weak comparison: `W/"1042"` names 1042),
         *     else 412 and nothing changes. `*` names any version, so it never holds for an authorized
         *     client: 412. Rarely what a caller wants; `If-Match` is how a change is made only on the
         *     state last read. The same syntax and bounds as the list's `If-None-Match`: a header that is
         *     not a list of entity-tags or `*`, or longer than 8192 characters, answers 400
         *     `invalid-request` with the pointer `/if-none-match`, before the 404s; a well-formed tag
         *     that names no version of ours (`"01042"`, `"abc"`) never matches.
         */
        IfNoneMatchOnChange: components["schemas"]["EntityTags"];
        /**
         * @description The resource's id, compared exactly; one path segment, so percent-encoded (`/` as `%2F`, a space as `%20`).
         * @example orders-api
         */
        ResourceId: components["schemas"]["EntityId"];
    };
    requestBodies: {
        /** @description The ids of the permissions (at most 256 KiB). */
        PermissionIds: {
            content: {
                "application/json": components["schemas"]["PermissionId"][];
            };
        };
    };
    headers: {
        /**
         * @description Where the state this answer shows (or the change it made) lies in the database's history:
         *     send it back as `Consistency-Token` to be answered from a state at least as new. Only with
         *     replicas (`DATABASE_REPLICA_URLS`). A refusal decided on the database's state (a 404, 412,
         *     422, or the change feed's 410) carries one too: the read that follows it (the list for a
         *     current `ETag`, the feed started again) then sees no older state. Opaque; today a
         *     PostgreSQL WAL position.
         * @example 0/3000148
         */
        "Consistency-Token": string;
        /**
         * @description The version of the client's grants on the resource (RFC 9110 §8.8.3), a strong entity-tag
         *     holding a positive decimal number: the same for every page and order, new whenever a grant
         *     is added or removed, or a granted permission is renamed or described anew (by any writer).
         *     For If-None-Match and If-Match.
         * @example "1042"
         */
        ETag: string;
        /**
         * @description RFC 8288 links to the `first`, `prev`, `next` and `last` pages, as absolute URLs that keep
         *     `limit` and `sort_by`. The commas of a `sort_by` are percent-encoded (`%2C`, the same order
         *     once decoded), so no comma stands inside a link's `<...>`. When the request names no plain
         *     `host[:port]` (no `Host`, as HTTP/1.0 may send it, or one with a comma, userinfo,
         *     percent-encoding or a port past 65535), the links are path-only references
         *     (`</resources/...?limit=50&offset=0&sort_by=name.asc>`), resolved against the request's URL.
         * @example <http://localhost:3000/resources/api/authorized_clients/app/permissions?limit=50&offset=0&sort_by=name.asc>; rel="first"
         */
        Link: string;
        /** @description Number of permissions granted to the client on the resource, across all pages. */
        "X-Total-Count": number;
    };
    pathItems: never;
}
export type $defs = Record<string, never>;
export interface operations {
    getLiveness: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: components["responses"]["Health"];
            400: components["responses"]["BadRequest"];
            408: components["responses"]["RequestTimeout"];
            431: components["responses"]["HeadersTooLarge"];
        };
    };
    listAllPermissionChanges: {
        parameters: {
            query?: {
                /** @description Only changes after this one (the `id` of the last change seen); without it, from the oldest kept. */
                after?: components["schemas"]["ChangeId"];
                /** @description Maximum number of changes on the page (polling only). */
                limit?: number;
                /** @description Only the changes of this resource. */
                resource_id?: components["schemas"]["EntityId"];
            };
            header?: {
                /**
                 * @description The `Consistency-Token` of an earlier answer (with replicas, `DATABASE_REPLICA_URLS`): the
                 *     answer is taken from a state at least as new as the one that answer showed or made, by a
                 *     replica that has replayed it or else by the primary, so a caller that passes on the latest
                 *     token it was given never sees its grants go back in time. Opaque: send it as received. A
                 *     value that is not a token answers 400 `invalid-request` with the pointer
                 *     `/consistency-token`. A token of a state no server has reached (another deployment's, or
                 *     one given before a failover that lost commits) is answered by the primary, from its
                 *     current state and with its own token, which is older. Without replicas it is checked and
                 *     otherwise ignored: there is one state to read.
                 * @example 0/3000148
                 */
                "Consistency-Token"?: components["parameters"]["ConsistencyToken"];
                /** @description The `id` of the last event a stream received (EventSource sends it when it reconnects); on a stream it wins over `after`; a polled page starts from `after` alone. */
                "Last-Event-ID"?: components["schemas"]["ChangeId"];
            };
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description A page of the feed, or (with `Accept: text/event-stream`) the feed as a stream. */
            200: {
                headers: {
                    /**
                     * @description `no-store` on a stream: every event is new, and nothing on the way may keep it.
                     * @example no-store
                     */
                    "Cache-Control"?: string;
                    "Consistency-Token": components["headers"]["Consistency-Token"];
                    /**
                     * @description RFC 8288 link to poll from next (polling only), carrying `after`, `limit` and `resource_id`. With `resource_id`, a page that is not full links on from where the feed stands, past the other resources' changes it skipped.
                     * @example <http://localhost:3000/permission_changes?after=11456300564480&limit=50>; rel="next"
                     */
                    Link?: string;
                    /**
                     * @description `Accept` on a page, `Accept, Last-Event-ID` on a stream: the answer depends on them.
                     * @example Accept
                     */
                    Vary: string;
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example [
                     *       {
                     *         "id": "11456300564480",
                     *         "at": "2026-11-23T21:04:05.123Z",
                     *         "resource_id": "orders-api",
                     *         "client_id": "billing-app",
                     *         "action": "unauthorized",
                     *         "permission_ids": [
                     *           "perm_read_refunds",
                     *           "perm_create_refunds"
                     *         ],
                     *         "actor": {
                     *           "sub": "platform-team",
                     *           "client_id": "permissions-console"
                     *         },
                     *         "request_id": "8d1c2f0e-5b7a-4c1e-9a51-1f0f8f3c2b6d"
                     *       }
                     *     ]
                     */
                    "application/json": components["schemas"]["FeedChange"][];
                    /**
                     * @example retry: 1000
                     *
                     *     id: 11456300564480
                     *     data: {"id":"11456300564480","at":"2026-11-23T21:04:05.123Z","resource_id":"orders-api","client_id":"billing-app","action":"unauthorized","permission_ids":["perm_read_refunds"],"actor":{"sub":"platform-team"},"request_id":"8d1c2f0e-5b7a-4c1e-9a51-1f0f8f3c2b6d"}
                     *
                     *     : heartbeat
                     */
                    "text/event-stream": string;
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["Forbidden"];
            408: components["responses"]["RequestTimeout"];
            410: components["responses"]["ChangesPruned"];
            431: components["responses"]["HeadersTooLarge"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    getProblemType: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /**
                 * @description The problem type's name, the last segment of its `type`.
                 * @example resource-not-found
                 */
                name: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The problem type's page, or (with `Accept: application/json`) the same as JSON. */
            200: {
                headers: {
                    /**
                     * @description The page changes only with the service's version.
                     * @example public, max-age=3600
                     */
                    "Cache-Control": string;
                    /** @description `Accept`: the media type of the answer depends on it. */
                    Vary: string;
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "type": "/problems/resource-not-found",
                     *       "title": "Resource not found",
                     *       "status": 404,
                     *       "when": "no resource has that id",
                     *       "what_to_do": "Check the resource id in the path: ids are compared exactly, case included."
                     *     }
                     */
                    "application/json": components["schemas"]["ProblemType"];
                    "text/html": string;
                };
            };
            /** @description The name is not the form of a problem type's name. */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["ValidationProblem"];
                };
            };
            /** @description No problem type has that name. */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            408: components["responses"]["RequestTimeout"];
            431: components["responses"]["HeadersTooLarge"];
        };
    };
    getReadiness: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: components["responses"]["Health"];
            400: components["responses"]["BadRequest"];
            408: components["responses"]["RequestTimeout"];
            431: components["responses"]["HeadersTooLarge"];
            503: components["responses"]["NotReady"];
        };
    };
    listPermissionChanges: {
        parameters: {
            query?: {
                /** @description Only changes older than this one (the `id` of the last change of the previous page). */
                before?: string;
                /** @description Maximum number of changes on the page. */
                limit?: number;
            };
            header?: {
                /**
                 * @description The `Consistency-Token` of an earlier answer (with replicas, `DATABASE_REPLICA_URLS`): the
                 *     answer is taken from a state at least as new as the one that answer showed or made, by a
                 *     replica that has replayed it or else by the primary, so a caller that passes on the latest
                 *     token it was given never sees its grants go back in time. Opaque: send it as received. A
                 *     value that is not a token answers 400 `invalid-request` with the pointer
                 *     `/consistency-token`. A token of a state no server has reached (another deployment's, or
                 *     one given before a failover that lost commits) is answered by the primary, from its
                 *     current state and with its own token, which is older. Without replicas it is checked and
                 *     otherwise ignored: there is one state to read.
                 * @example 0/3000148
                 */
                "Consistency-Token"?: components["parameters"]["ConsistencyToken"];
            };
            path: {
                /**
                 * @description The client's id, compared exactly; one path segment, so percent-encoded (`/` as `%2F`, a space as `%20`).
                 * @example billing-app
                 */
                client_id: components["parameters"]["ClientId"];
                /**
                 * @description The resource's id, compared exactly; one path segment, so percent-encoded (`/` as `%2F`, a space as `%20`).
                 * @example orders-api
                 */
                resource_id: components["parameters"]["ResourceId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description One page of the changes, newest first. */
            200: {
                headers: {
                    "Consistency-Token": components["headers"]["Consistency-Token"];
                    /**
                     * @description RFC 8288 link to the next (older) page, present while there is one.
                     * @example <http://localhost:3000/resources/orders-api/authorized_clients/billing-app/permission_changes?limit=50&before=42>; rel="next"
                     */
                    Link?: string;
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example [
                     *       {
                     *         "id": "42",
                     *         "at": "2026-11-23T21:04:05.123Z",
                     *         "action": "unauthorized",
                     *         "permission_ids": [
                     *           "perm_read_refunds",
                     *           "perm_create_refunds"
                     *         ],
                     *         "actor": {
                     *           "sub": "platform-team",
                     *           "client_id": "permissions-console"
                     *         },
                     *         "request_id": "8d1c2f0e-5b7a-4c1e-9a51-1f0f8f3c2b6d"
                     *       }
                     *     ]
                     */
                    "application/json": components["schemas"]["PermissionChange"][];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["Forbidden"];
            404: components["responses"]["NotFound"];
            408: components["responses"]["RequestTimeout"];
            431: components["responses"]["HeadersTooLarge"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    listClientPermissions: {
        parameters: {
            query?: {
                /** @description Maximum number of permissions on the page. */
                limit?: number;
                /** @description Page number; `limit * offset` records are skipped. */
                offset?: number;
                /**
                 * @description Comma-separated sort keys, each `<property>` or `<property>.asc|.desc` (no suffix means
                 *     ascending). Properties: `id`, `name`, `description`. A repeated property keeps its first
                 *     occurrence. Missing descriptions sort after all others ascending and before them descending.
                 */
                sort_by?: string;
            };
            header?: {
                /**
                 * @description The `Consistency-Token` of an earlier answer (with replicas, `DATABASE_REPLICA_URLS`): the
                 *     answer is taken from a state at least as new as the one that answer showed or made, by a
                 *     replica that has replayed it or else by the primary, so a caller that passes on the latest
                 *     token it was given never sees its grants go back in time. Opaque: send it as received. A
                 *     value that is not a token answers 400 `invalid-request` with the pointer
                 *     `/consistency-token`. A token of a state no server has reached (another deployment's, or
                 *     one given before a failover that lost commits) is answered by the primary, from its
                 *     current state and with its own token, which is older. Without replicas it is checked and
                 *     otherwise ignored: there is one state to read.
                 * @example 0/3000148
                 */
                "Consistency-Token"?: components["parameters"]["ConsistencyToken"];
                /**
                 * @description The `ETag` of a page already read, or `*`: the page is answered only if the client's grants
                 *     are still at a version it names, else 412 `precondition-failed` (RFC 9110 §13.1.1), and no
                 *     page of another version is served. Sent with each next page, it makes a walk through the
                 *     pages read one version of the grants: no permission seen twice or missed because a change
                 *     came between two pages. `*` holds whenever the client is authorized. Strong comparison, as
                 *     on a change: a weak tag never matches, nor does a tag that names no version (`"01042"`,
                 *     `"abc"`). Evaluated before `If-None-Match`, and after the 404s. The same syntax and bounds as
                 *     the other conditional headers: a header that is not `*` or a list of entity-tags, or longer
                 *     than 8192 characters, answers 400 `invalid-request` with the pointer `/if-match`.
                 */
                "If-Match"?: components["parameters"]["IfMatchOnList"];
                /**
                 * @description An `ETag` from an earlier answer, or `*`: when it names the current version of the client's
                 *     grants (or is `*` and the client is authorized) the answer is 304 with no body. As RFC 9110
                 *     §13.1.2 writes it: `*`, or a comma-separated list of entity-tags (`"1042"`, `W/"1042"`;
                 *     spaces or tabs around the commas and empty elements are allowed), any of which may match.
                 *     Weak comparison: `W/"1042"` matches `"1042"`. A tag is compared as written: `"01042"` is not
                 *     `"1042"`. A header that is not this syntax (an unquoted `1042`, `"1042" x`, `*` inside a
                 *     list, a list with no tag) or is longer than 8192 characters answers 400 `invalid-request`
                 *     with the pointer `/if-none-match`; it is checked with the other parameters, after
                 *     authentication and before the resource, the client and the authorization are looked up.
                 */
                "If-None-Match"?: components["parameters"]["IfNoneMatch"];
            };
            path: {
                /**
                 * @description The client's id, compared exactly; one path segment, so percent-encoded (`/` as `%2F`, a space as `%20`).
                 * @example billing-app
                 */
                client_id: components["parameters"]["ClientId"];
                /**
                 * @description The resource's id, compared exactly; one path segment, so percent-encoded (`/` as `%2F`, a space as `%20`).
                 * @example orders-api
                 */
                resource_id: components["parameters"]["ResourceId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description One page of the client's permissions on the resource. */
            200: {
                headers: {
                    "Consistency-Token": components["headers"]["Consistency-Token"];
                    ETag: components["headers"]["ETag"];
                    Link: components["headers"]["Link"];
                    "X-Total-Count": components["headers"]["X-Total-Count"];
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example [
                     *       {
                     *         "id": "perm_create_customers",
                     *         "name": "create:customers",
                     *         "description": "Create customers"
                     *       },
                     *       {
                     *         "id": "perm_create_invoices",
                     *         "name": "create:invoices",
                     *         "description": "Create invoices"
                     *       },
                     *       {
                     *         "id": "perm_create_orders",
                     *         "name": "create:orders",
                     *         "description": "Create orders"
                     *       }
                     *     ]
                     */
                    "application/json": components["schemas"]["Permission"][];
                };
            };
            304: components["responses"]["NotModified"];
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["Forbidden"];
            404: components["responses"]["NotFound"];
            408: components["responses"]["RequestTimeout"];
            412: components["responses"]["PreconditionFailed"];
            431: components["responses"]["HeadersTooLarge"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    grantClientPermissions: {
        parameters: {
            query?: never;
            header?: {
                /**
                 * @description The `Consistency-Token` of an earlier answer (with replicas, `DATABASE_REPLICA_URLS`): the
                 *     answer is taken from a state at least as new as the one that answer showed or made, by a
                 *     replica that has replayed it or else by the primary, so a caller that passes on the latest
                 *     token it was given never sees its grants go back in time. Opaque: send it as received. A
                 *     value that is not a token answers 400 `invalid-request` with the pointer
                 *     `/consistency-token`. A token of a state no server has reached (another deployment's, or
                 *     one given before a failover that lost commits) is answered by the primary, from its
                 *     current state and with its own token, which is older. Without replicas it is checked and
                 *     otherwise ignored: there is one state to read.
                 * @example 0/3000148
                 */
                "Consistency-Token"?: components["parameters"]["ConsistencyToken"];
                /**
                 * @description The `ETag` of the list as last read, or `*`: the change is made only if the client's grants
                 *     have not changed since, else 412 and nothing changes; `*` holds whenever the client is
                 *     authorized. As RFC 9110 §13.1.1 writes it: `*`, or a comma-separated list of entity-tags
                 *     (`"1042"`, `W/"1042"`; spaces or tabs around the commas and empty elements are allowed), any
                 *     of which may match. Strong comparison: a weak tag never matches. An `ETag` of this service
                 *     is a version in decimal, without leading zeros, from 1 to 9223372036854775807; any other
                 *     well-formed tag (`"01042"`, `"0"`, `"abc"`, a number past that) names no version and
                 *     answers 412. A header that is not this syntax (an unquoted `1042`, `"1042" x`, `*` inside a
                 *     list, a list with no tag) or is longer than 8192 characters answers 400 `invalid-request`
                 *     with the pointer `/if-match`; it is checked with the other parameters, after authentication
                 *     and before the resource, the client and the authorization are looked up (so before the 404s).
                 */
                "If-Match"?: components["parameters"]["IfMatch"];
                /**
                 * @description On a change, RFC 9110 §13.1.2's other precondition: the change is made only if the
                 *     client's grants are not at a version it names (weak comparison: `W/"1042"` names 1042),
                 *     else 412 and nothing changes. `*` names any version, so it never holds for an authorized
                 *     client: 412. Rarely what a caller wants; `If-Match` is how a change is made only on the
                 *     state last read. The same syntax and bounds as the list's `If-None-Match`: a header that is
                 *     not a list of entity-tags or `*`, or longer than 8192 characters, answers 400
                 *     `invalid-request` with the pointer `/if-none-match`, before the 404s; a well-formed tag
                 *     that names no version of ours (`"01042"`, `"abc"`) never matches.
                 */
                "If-None-Match"?: components["parameters"]["IfNoneMatchOnChange"];
            };
            path: {
                /**
                 * @description The client's id, compared exactly; one path segment, so percent-encoded (`/` as `%2F`, a space as `%20`).
                 * @example billing-app
                 */
                client_id: components["parameters"]["ClientId"];
                /**
                 * @description The resource's id, compared exactly; one path segment, so percent-encoded (`/` as `%2F`, a space as `%20`).
                 * @example orders-api
                 */
                resource_id: components["parameters"]["ResourceId"];
            };
            cookie?: never;
        };
        requestBody: components["requestBodies"]["PermissionIds"];
        responses: {
            /** @description The permissions are granted (or already were). */
            204: {
                headers: {
                    "Consistency-Token": components["headers"]["Consistency-Token"];
                    /** @description The version of the client's grants now, for a later `If-Match`. */
                    ETag: string;
                    [name: string]: unknown;
                };
                content?: never;
            };
            400: components["responses"]["BadChangeRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["Forbidden"];
            404: components["responses"]["NotFound"];
            408: components["responses"]["RequestTimeout"];
            412: components["responses"]["PreconditionFailed"];
            413: components["responses"]["ContentTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            /**
             * @description Some ids are not permissions of the resource (`unknown-permissions`), or a grant is too
             *     large for the database to store (`grant-too-large`); nothing was granted.
             */
            422: {
                headers: {
                    "Consistency-Token": components["headers"]["Consistency-Token"];
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["UnknownPermissionsProblem"] | components["schemas"]["Problem"];
                };
            };
            431: components["responses"]["HeadersTooLarge"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    unauthorizeClientPermissions: {
        parameters: {
            query?: never;
            header?: {
                /**
                 * @description The `Consistency-Token` of an earlier answer (with replicas, `DATABASE_REPLICA_URLS`): the
                 *     answer is taken from a state at least as new as the one that answer showed or made, by a
                 *     replica that has replayed it or else by the primary, so a caller that passes on the latest
                 *     token it was given never sees its grants go back in time. Opaque: send it as received. A
                 *     value that is not a token answers 400 `invalid-request` with the pointer
                 *     `/consistency-token`. A token of a state no server has reached (another deployment's, or
                 *     one given before a failover that lost commits) is answered by the primary, from its
                 *     current state and with its own token, which is older. Without replicas it is checked and
                 *     otherwise ignored: there is one state to read.
                 * @example 0/3000148
                 */
                "Consistency-Token"?: components["parameters"]["ConsistencyToken"];
                /**
                 * @description The `ETag` of the list as last read, or `*`: the change is made only if the client's grants
                 *     have not changed since, else 412 and nothing changes; `*` holds whenever the client is
                 *     authorized. As RFC 9110 §13.1.1 writes it: `*`, or a comma-separated list of entity-tags
                 *     (`"1042"`, `W/"1042"`; spaces or tabs around the commas and empty elements are allowed), any
                 *     of which may match. Strong comparison: a weak tag never matches. An `ETag` of this service
                 *     is a version in decimal, without leading zeros, from 1 to 9223372036854775807; any other
                 *     well-formed tag (`"01042"`, `"0"`, `"abc"`, a number past that) names no version and
                 *     answers 412. A header that is not this syntax (an unquoted `1042`, `"1042" x`, `*` inside a
                 *     list, a list with no tag) or is longer than 8192 characters answers 400 `invalid-request`
                 *     with the pointer `/if-match`; it is checked with the other parameters, after authentication
                 *     and before the resource, the client and the authorization are looked up (so before the 404s).
                 */
                "If-Match"?: components["parameters"]["IfMatch"];
                /**
                 * @description On a change, RFC 9110 §13.1.2's other precondition: the change is made only if the
                 *     client's grants are not at a version it names (weak comparison: `W/"1042"` names 1042),
                 *     else 412 and nothing changes. `*` names any version, so it never holds for an authorized
                 *     client: 412. Rarely what a caller wants; `If-Match` is how a change is made only on the
                 *     state last read. The same syntax and bounds as the list's `If-None-Match`: a header that is
                 *     not a list of entity-tags or `*`, or longer than 8192 characters, answers 400
                 *     `invalid-request` with the pointer `/if-none-match`, before the 404s; a well-formed tag
                 *     that names no version of ours (`"01042"`, `"abc"`) never matches.
                 */
                "If-None-Match"?: components["parameters"]["IfNoneMatchOnChange"];
            };
            path: {
                /**
                 * @description The client's id, compared exactly; one path segment, so percent-encoded (`/` as `%2F`, a space as `%20`).
                 * @example billing-app
                 */
                client_id: components["parameters"]["ClientId"];
                /**
                 * @description The resource's id, compared exactly; one path segment, so percent-encoded (`/` as `%2F`, a space as `%20`).
                 * @example orders-api
                 */
                resource_id: components["parameters"]["ResourceId"];
            };
            cookie?: never;
        };
        requestBody: components["requestBodies"]["PermissionIds"];
        responses: {
            /** @description The permissions were removed (or were not granted). */
            204: {
                headers: {
                    "Consistency-Token": components["headers"]["Consistency-Token"];
                    /** @description The version of the client's grants now, for a later `If-Match`. */
                    ETag: string;
                    [name: string]: unknown;
                };
                content?: never;
            };
            400: components["responses"]["BadChangeRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["Forbidden"];
            404: components["responses"]["NotFound"];
            408: components["responses"]["RequestTimeout"];
            412: components["responses"]["PreconditionFailed"];
            413: components["responses"]["ContentTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            /** @description Some ids are not permissions of the resource; nothing was removed. */
            422: {
                headers: {
                    "Consistency-Token": components["headers"]["Consistency-Token"];
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["UnknownPermissionsProblem"];
                };
            };
            431: components["responses"]["HeadersTooLarge"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
}
