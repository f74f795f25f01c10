import type { Target } from '../../../db/queries.js'
import { problems } from '../../problems.js'

/** Throws the 404 problem that says which part of the path does not exist. */
export function assertClientAuthorized (target: Target, resourceId: string, clientId: string): void {
  if (!target.resourceExists) throw problems.resourceNotFound(resourceId)
  if (!target.clientExists) throw problems.clientNotFound(clientId)
  if (!target.authorized) throw problems.clientNotAuthorized(resourceId, clientId)
}
