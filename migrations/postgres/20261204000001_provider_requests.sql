-- The provider's own id of an attempt's request (a background response's
-- id), kept as soon as the provider answers with it: the status lookup and
-- the cancel call of the Responses API ask by it.
alter table attempts add column provider_request_id text;
