-- Every trigger function of ours looks its names up through a search path of its own: pg_catalog,
-- the schema the migrations run in, and pg_temp last. They wrote table and function names
-- unqualified and took the caller's search_path, which the caller chooses, with its temporary
-- tables first unless pg_temp is named: a writer with TEMP (PUBLIC has it by default) could make
-- the triggers read and write its own tables, and a schema put first could answer
-- pg_current_xact_id(). A DELETE from the middle of the history then passed the prune checks
-- without moving the prune mark, a grant count or a version stayed behind its grants, and a change
-- could take an id below the feed's horizon. Named one by one: other trigger functions in the same
-- schema (an extension's, an operator's) are not ours to change. A trigger function added later
-- takes the same setting (test/db/schema.test.ts checks that every one has it).
DO $$
DECLARE
  ours text;
BEGIN
  FOREACH ours IN ARRAY ARRAY[
    'keep_granted_permission_in_place', 'count_granted', 'count_ungranted',
    'count_regranted', 'count_truncated', 'copy_granted_permission', 'describe_grants_anew',
    'next_authorization_version', 'refuse_history_rewrite', 'check_pruned_changes',
    'number_permission_change', 'announce_permission_changes', 'check_granted_descriptions',
    'version_shown_grants', 'lock_authorizations_shown'
  ] LOOP
    EXECUTE format('ALTER FUNCTION %I.%I() SET search_path = pg_catalog, %I, pg_temp', current_schema(), ours, current_schema());
  END LOOP;
END $$;
