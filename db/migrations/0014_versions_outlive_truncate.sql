-- The authorizations' versions (0004) are the list's ETags and the keys of its kept pages: a
-- version issued twice, for two states, answers a 304 or a kept page for the wrong one. 0004 made
-- their sequence OWNED BY authorizations.version, and TRUNCATE ... RESTART IDENTITY restarts every
-- sequence owned by a column of a table it truncates: a reset of the data (TRUNCATE resources,
-- clients RESTART IDENTITY CASCADE, then a seed) issued the same versions again, and the instances
-- running served the pages kept before it. Owned by no column, the sequence goes on from where it
-- was through any TRUNCATE; only an explicit setval or ALTER SEQUENCE moves it (docs/scaling.md).
ALTER SEQUENCE authorization_versions OWNED BY NONE;
