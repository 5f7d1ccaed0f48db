// Form controls the views share.

/** A labelled choice among `options`, or none (`null`, shown as `none`). */
export function OptionalSelect<T extends string>(props: {
  label: string;
  /** The label is read by screen readers only (a compact header). */
  hideLabel?: boolean;
  value: T | null;
  options: readonly T[];
  none: string;
  /** Options that cannot be used now, with why (shown beside them). */
  unavailable?: Partial<Record<T, string>>;
  onChange: (value: T | null) => void;
}) {
  const { label, hideLabel, value, options, none, unavailable, onChange } = props;
  return (
    <label>
      {hideLabel ? <span class="visually-hidden">{label}</span> : label}
      <select value={value ?? ""} onChange={(e) => onChange((e.currentTarget.value || null) as T | null)}>
        <option value="">{none}</option>
        {options.map((o) => (
          <option key={o} value={o} title={unavailable?.[o]}>
            {unavailable?.[o] ? `${o} (unavailable)` : o}
          </option>
        ))}
      </select>
    </label>
  );
}
