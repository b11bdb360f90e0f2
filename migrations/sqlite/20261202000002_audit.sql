-- An output the provider gave that did not become the attempt's output:
-- one that broke the task's contract, or one that came after the attempt
-- was settled (or was no longer its worker's to settle). Kept for audit,
-- never validated: {"why", "received_at", "output"} or, past 64 KiB,
-- {"why", "received_at", "truncated": true, "text"}.
alter table attempts add column unapplied_output text;
