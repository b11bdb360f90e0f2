-- Every primary and unique key leads with owner_id (docs/scaling.md): a
-- webhook delivery was keyed by its id alone, and its tries by the
-- delivery's id. Both now lead with the owner, so that a database sharded by
-- owner keeps a delivery, its tries, its endpoint and its job on one shard.
alter table webhook_tries add column owner_id text;
update webhook_tries t set owner_id = d.owner_id from webhook_deliveries d where d.id = t.delivery_id;
alter table webhook_tries alter column owner_id set not null;
alter table webhook_tries drop constraint webhook_tries_delivery_id_fkey;
alter table webhook_tries drop constraint webhook_tries_pkey;
alter table webhook_deliveries drop constraint webhook_deliveries_pkey;
alter table webhook_deliveries add primary key (owner_id, id);
alter table webhook_tries add primary key (owner_id, delivery_id, number);
alter table webhook_tries add foreign key (owner_id, delivery_id)
    references webhook_deliveries (owner_id, id) on delete cascade;
