// Form controls the views share.

/** A labelled choice among `options`, or none (`null`, shown as `none`). */
export function OptionalSelect<T extends string>(props: {
  label: string;
  /** The label is read by screen readers only (a compact header). */
  hideLabel?: boolean;
  value: T | null;
  options: readonly T[];
  none: string;
  onChange: (value: T | null) => void;
}) {
  const { label, hideLabel, value, options, none, onChange } = props;
  return (
    <label>
      {hideLabel ? <span class="visually-hidden">{label}</span> : label}
      <select value={value ?? ""} onChange={(e) => onChange((e.currentTarget.value || null) as T | null)}>
        <option value="">{none}</option>
        {options.map((o) => (
          <option key={o} value={o}>
            {o}
          </option>
        ))}
      </select>
    </label>
  );
}
