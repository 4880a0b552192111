-- rewind state, version 7: when a lease's holder took it and last renewed it.
--
-- acquired_at: when the current holder took the lease (a holder that takes
-- its own lease again keeps it); renewed_at: when it last took or renewed
-- it. Both on the state's clock, like expires_at; NULL when released. The
-- operators' metrics show the leader's tenure and how long since its last
-- renewal from them. Written for every backend (the double-brace tokens of
-- store/migrate.go).
ALTER TABLE leases ADD COLUMN acquired_at {{int}};
ALTER TABLE leases ADD COLUMN renewed_at {{int}};
