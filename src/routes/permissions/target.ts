import type { ChangeResult } from '../../../db/queries/change.js'
import type { Target } from '../../../db/queries/statement.js'
import { problems } from '../../problems.js'

/** Throws the 404 problem that says which part of the path does not exist. */
export function assertClientAuthorized (target: Target, resourceId: string, clientId: string): void {
  if (!target.resourceExists) throw problems.resourceNotFound(resourceId)
  if (!target.clientExists) throw problems.clientNotFound(clientId)
  if (!target.authorized) throw problems.clientNotAuthorized(resourceId, clientId)
}

/**
 * A change's refusals, in order: which part is missing (404), a stale If-Match, then an
 * If-None-Match naming the current version (412, RFC 9110 §13.2.2's order), unknown ids (422).
 */
export function assertChangeApplies (result: ChangeResult, resourceId: string, clientId: string, unchanged: string): void {
  assertClientAuthorized(result, resourceId, clientId)
  if (!result.preconditionMet) throw problems.preconditionFailed()
  if (!result.noneMatchMet) throw problems.noneMatchFailed()
  if (result.unknownPermissionIds.length > 0) throw problems.unknownPermissions(resourceId, result.unknownPermissionIds, unchanged)
}
