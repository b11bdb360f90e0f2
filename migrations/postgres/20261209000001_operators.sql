-- An operator: a key of the installation's staff, reaching every owner
-- (resolving any owner's unknown attempts, the dashboard across owners,
-- revoking any key, providers and qualifications). An admin key reaches its
-- own owner only. An operator is stored as an admin key marked `operator`,
-- so that the role column keeps the values it always had.
alter table api_keys add column operator boolean not null default false;
alter table api_keys add constraint api_keys_operator_is_an_admin check (not operator or role = 'admin');
