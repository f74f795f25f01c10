-- Every trigger function of this schema looks its names up through the search path of its own:
-- pg_catalog, this schema, and pg_temp last. They wrote table and function names unqualified and
-- took the caller's search_path, which the caller chooses, with its temporary tables first unless
-- pg_temp is named: a writer with TEMP (PUBLIC has it by default) could make the triggers read and
-- write its own tables, and a schema put first could answer pg_current_xact_id(). A DELETE from
-- the middle of the history then passed the prune checks without moving the prune mark, a grant
-- count or a version stayed behind its grants, and a change could take an id below the feed's
-- horizon. Functions added later take the same setting (test/db/schema.test.ts checks them all).
DO $$
DECLARE
  trigger_function regprocedure;
BEGIN
  FOR trigger_function IN
    SELECT p.oid::regprocedure FROM pg_proc p
    WHERE p.pronamespace = current_schema()::regnamespace AND p.prorettype = 'trigger'::regtype
  LOOP
    EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, %I, pg_temp', trigger_function, current_schema());
  END LOOP;
END $$;
