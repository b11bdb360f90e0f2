-- The server's own secrets, each made once, here. `callbacks` keys the
-- token of every attempt's callback URL (an HMAC of the attempt), so that
-- only the provider given that URL can settle the attempt by it: an owner,
-- who sees its attempts' ids, cannot forge it. 244 random bits, from the
-- server's strong random source.
create table server_secrets (
    name    text primary key,
    secret  text not null
);
insert into server_secrets (name, secret)
values ('callbacks', replace(gen_random_uuid()::text, '-', '') || replace(gen_random_uuid()::text, '-', ''));
