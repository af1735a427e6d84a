-- A task keeps its components as the planner grouped them,
-- {"<type>": [target, …]}, each type's targets in inventory order, instead
-- of a flat list regrouped at every load. Tasks stored before are
-- converted (safe to run again: only arrays are touched).
UPDATE tasks SET components = COALESCE((
    SELECT jsonb_object_agg(g.component_type, g.targets)
    FROM (
        SELECT c.value ->> 'component_type' AS component_type,
               jsonb_agg(c.value ORDER BY c.ordinality) AS targets
        FROM jsonb_array_elements(tasks.components) WITH ORDINALITY AS c(value, ordinality)
        GROUP BY 1
    ) g
), '{}'::jsonb)
WHERE jsonb_typeof(components) = 'array';
