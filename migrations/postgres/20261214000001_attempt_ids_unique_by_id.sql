-- An attempt's id is unique per owner, as before, but the unique index now
-- leads with the id. Led by the owner, it matched every statement that
-- reads an attempt by its primary key (owner, job, number) on its first
-- column, and it is the narrower of the two: a generic plan made while
-- the table was small could take it and then read every attempt of the
-- owner to find one, for as long as the connection lived. No statement
-- reads attempts by owner and id; led by the id, the index can no longer
-- stand in for the primary key.
alter table attempts drop constraint attempts_owner_id;
alter table attempts add constraint attempts_id_owner unique (id, owner_id);
