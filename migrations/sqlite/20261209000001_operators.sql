-- An operator: a key of the installation's staff, reaching every owner
-- (resolving any owner's unknown attempts, the dashboard across owners,
-- revoking any key, providers and qualifications). An admin key reaches its
-- own owner only. An operator is stored as an admin key marked `operator`,
-- so that the role column keeps the values it always had.
alter table api_keys add column operator integer not null default 0
    check (operator in (0, 1) and (operator = 0 or role = 'admin'));
