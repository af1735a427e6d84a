-- Racks carry free-form labels ({"row": "B", "site": "berlin-1"}) that
-- tasks target racks by; a task keeps the operator's description.
ALTER TABLE racks ADD COLUMN labels jsonb NOT NULL DEFAULT '{}'::jsonb;
CREATE INDEX racks_by_labels ON racks USING gin (labels jsonb_path_ops);
ALTER TABLE tasks ADD COLUMN description text NOT NULL DEFAULT '';
